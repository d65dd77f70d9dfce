"""The one place that touches habana_frameworks: mark_step, HPU graphs, device queries (imported lazily)."""
from __future__ import annotations

import importlib
import weakref

import torch


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
    """`model` wrapped in HPU graphs in place, as optimum-habana's run_generation.py wraps models for its own
    generate() (the CLI's baseline); a model already wrapped is returned as is."""
    from ..registry import model_state

    if is_graph_wrapped(model):  # habana's wrapper has no such guard: a second wrap nests a capture in a capture
        return model
    hpu = importlib.import_module("habana_frameworks.torch.hpu")
    wrapped = hpu.wrap_in_hpu_graph(model)
    model_state(wrapped)["hpu_graph"] = True
    return wrapped


FEATURE_LAYERS_ARG = "optimum_uag_feature_layers"


class GraphStep(torch.nn.Module):
    """One model's forward as optimum-uag runs it in HPU graphs: this module is what gets wrapped, never the user's
    model (habana's wrapper replaces `forward` for good and has no already-wrapped guard).

    It holds the model weakly (it lives in the model's registry entry) and, for token_idx models, the pooled
    `past` tuple as an attribute: a captured graph reads it by reference, whereas a `past` passed as an argument
    would be a graph input, which habana's copy_to copies onto itself on every replay (the whole KV cache). A
    model the caller already wrapped is called with `bypass_hpu_graphs=True`: its own graphs stay its own."""

    def __init__(self, model, past=None):
        super().__init__()
        self._model = weakref.ref(model)
        self.past = past

    def forward(self, with_past: bool = False, **kwargs):
        model = self._model()
        if with_past:
            kwargs["past_key_values"] = self.past
        kwargs.pop("bypass_hpu_graphs", None)  # (a GraphStep called unwrapped: hpu_graphs=False)
        kwargs.pop(FEATURE_LAYERS_ARG, None)  # a graph key only (runner._hidden_kwargs), not the model's
        if is_graph_wrapped(model):
            kwargs["bypass_hpu_graphs"] = True
        return model(**kwargs)


def graph_step(model, key, past=None) -> GraphStep:
    """The HPU-graph-wrapped GraphStep of `model` for `key` (a pooled cache), made once and kept with the model:
    a later call with the same cache replays the graphs captured before."""
    from ..registry import model_state

    steps = model_state(model).setdefault("graph_steps", {})
    step = steps.get(key)
    if step is None:
        step = steps[key] = importlib.import_module("habana_frameworks.torch.hpu").wrap_in_hpu_graph(
            GraphStep(model, past))
    return step


def free_caches(model) -> None:
    """Drop the KV caches, HPU graphs and feature buffers optimum-uag pooled for `model` (they also go with it)."""
    from ..registry import model_state

    state = model_state(model)
    for step in state.pop("graph_steps", {}).values():
        step.clear_cache()
    for name in ("kv_pool", "feature_buffers"):
        state.pop(name, None)


def is_graph_wrapped(model) -> bool:
    """True when habana's wrap_in_hpu_graph wrapped this module (it sets clear_cache on the instance)."""
    from ..registry import model_state

    return "clear_cache" in getattr(model, "__dict__", {}) or bool(model_state(model).get("hpu_graph"))


def is_gaudi_model(model) -> bool:
    """True for optimum-habana's Gaudi model classes (after adapt_transformers_to_gaudi) or a model on HPU."""
    if any(cls.__module__.startswith("optimum.habana") for cls in type(model).__mro__):  # or a subclass of one
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
