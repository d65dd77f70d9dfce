"""Gaudi (Optimum Habana) integration: static token_idx caches, HPU graphs, lazy mode, FP8 quantization."""
from __future__ import annotations

from .device import free_caches
from .options import GaudiOptions, pop_gaudi_options
from .runner import GaudiModelRunner, cache_mechanism


# What the Gaudi path is written and tested against (docs/gaudi.md): optimum-habana's model classes and generate
# change between releases, and its releases pin one transformers and one SynapseAI (habana-torch-plugin) line.
SUPPORTED_OPTIMUM_HABANA = ("1.21",)
SUPPORTED_TRANSFORMERS = ("4.55",)
SUPPORTED_SYNAPSE = ("1.24",)  # optimum-habana 1.21.2 is validated with Intel Gaudi Software 1.24


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def check_versions() -> None:
    """Refuse a stack the Gaudi path was not written for, naming the fix (raises ImportError)."""
    habana = _version("optimum-habana")
    if habana is None:
        raise ImportError("optimum_uag.gaudi needs optimum-habana: pip install 'optimum-uag[gaudi]' (it leaves the "
                          "Gaudi image's torch as it is)")
    problems = []
    if not habana.startswith(SUPPORTED_OPTIMUM_HABANA):
        problems.append(f"optimum-habana {habana} (supported: {', '.join(v + '.x' for v in SUPPORTED_OPTIMUM_HABANA)})")
    transformers = _version("transformers") or "?"
    if not transformers.startswith(SUPPORTED_TRANSFORMERS):
        problems.append(f"transformers {transformers} (optimum-habana {habana} needs "
                        f"{', '.join(v + '.x' for v in SUPPORTED_TRANSFORMERS)})")
    plugin = _version("habana-torch-plugin")  # absent under the emulator (CPU dry runs)
    if plugin is not None and not plugin.startswith(SUPPORTED_SYNAPSE):
        problems.append(f"SynapseAI (habana-torch-plugin) {plugin} (supported: "
                        f"{', '.join(v + '.x' for v in SUPPORTED_SYNAPSE)})")
    if problems:
        raise ImportError("optimum_uag.gaudi is not tested with " + "; ".join(problems) + ". Install the supported "
                          "stack: pip install 'optimum-uag[gaudi]' on a Gaudi image of a supported SynapseAI release "
                          "(docs/gaudi.md, 'Supported versions')")


def adapt() -> None:
    """Run optimum-habana's adapt_transformers_to_gaudi() once (Gaudi model classes, GaudiGenerationMixin)."""
    from .device import available

    if not available():
        raise ImportError(
            "optimum_uag.gaudi needs the Intel Gaudi software stack (habana_frameworks is not importable); on a "
            "machine without Gaudi use --device cpu, or optimum_uag.testing.hpu_emulator.HPUEmulator for a dry-run"
        )
    check_versions()
    from optimum.habana.transformers.generation import GaudiGenerationMixin
    from optimum.habana.transformers.modeling_utils import adapt_transformers_to_gaudi

    from .. import patch

    own = GaudiGenerationMixin.__dict__["generate"]
    if patch.unwrapped_generate() is getattr(own, "_original", own):  # adapted already (maybe routed since)
        return
    was_enabled = patch.is_enabled()
    patch.disable()
    adapt_transformers_to_gaudi()
    if was_enabled:
        patch.enable()


def enable() -> None:
    """adapt_transformers_to_gaudi() (if not done yet), then route generate(assistant_model=...) to optimum-uag;
    it holds if adapt_transformers_to_gaudi() runs again later (optimum-habana's run_generation.py calls it)."""
    from .. import patch
    from ..runners import register_plan_hook
    from .steps import gaudi_plan

    adapt()  # (first: without Gaudi software it raises the ImportError that names the fix)
    from optimum.habana.transformers.generation import GaudiGenerationMixin

    register_plan_hook(gaudi_plan)  # the engine asks registered backends first; it never imports this package
    # GaudiGenerationMixin's own generate() too: classes inheriting it directly (Baichuan, ChatGLM, MiniCPM3) are
    # reached, and a later adapt_transformers_to_gaudi() (upstream's setup_env) copies the routed one back
    patch.enable(GaudiGenerationMixin)


__all__ = ["GaudiModelRunner", "GaudiOptions", "adapt", "cache_mechanism", "check_versions", "enable", "free_caches",
           "pop_gaudi_options"]
