"""The one place that touches habana_frameworks: mark_step, HPU graphs, device queries (imported lazily)."""
from __future__ import annotations

import importlib


def available() -> bool:
    """True when habana_frameworks imports (a Gaudi machine, or the HPU emulator in tests)."""
    try:
        importlib.import_module("habana_frameworks.torch.core")
        return True
    except ImportError:
        return False


def mark_step() -> None:
    """End the current lazy-mode graph (habana_frameworks.torch.core.mark_step)."""
    importlib.import_module("habana_frameworks.torch.core").mark_step()


def graph_wrapped(model):
    """`model` with its forward captured in HPU graphs (one capture per input shape); wrapped once."""
    from ..registry import model_state

    if is_graph_wrapped(model):  # habana's wrapper has no such guard: a second wrap nests a capture in a capture
        return model
    hpu = importlib.import_module("habana_frameworks.torch.hpu")
    wrapped = hpu.wrap_in_hpu_graph(model)
    model_state(wrapped)["hpu_graph"] = True
    return wrapped


def is_graph_wrapped(model) -> bool:
    """True when habana's wrap_in_hpu_graph wrapped this module (it sets clear_cache on the instance)."""
    from ..registry import model_state

    return "clear_cache" in getattr(model, "__dict__", {}) or bool(model_state(model).get("hpu_graph"))


def is_gaudi_model(model) -> bool:
    """True for optimum-habana's Gaudi model classes (after adapt_transformers_to_gaudi) or a model on HPU."""
    if type(model).__module__.startswith("optimum.habana"):
        return True
    device = getattr(model, "device", None)
    return getattr(device, "type", None) == "hpu"


def set_env() -> None:
    """habana_frameworks.torch.core.hpu_set_env(), before FP8 (INC) models reach the HPU (as optimum-habana)."""
    importlib.import_module("habana_frameworks.torch.core").hpu_set_env()


def synchronize() -> None:
    """Wait for the HPU's queued work (habana_frameworks.torch.hpu.synchronize)."""
    importlib.import_module("habana_frameworks.torch.hpu").synchronize()


def initialize_fp8(model) -> None:
    """habana_frameworks.torch.core.hpu_initialize(model, mark_only_scales_as_const=True), after INC's convert."""
    importlib.import_module("habana_frameworks.torch.core").hpu_initialize(model, mark_only_scales_as_const=True)
