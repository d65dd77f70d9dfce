"""Gaudi (Optimum Habana) integration: static token_idx caches, HPU graphs, lazy mode, FP8 quantization."""
from __future__ import annotations

from .options import GaudiOptions, pop_gaudi_options
from .runner import GaudiModelRunner, cache_mechanism


def adapt() -> None:
    """Run optimum-habana's adapt_transformers_to_gaudi() once (Gaudi model classes, GaudiGenerationMixin)."""
    from .device import available

    if not available():
        raise ImportError(
            "optimum_uag.gaudi needs the Intel Gaudi software stack (habana_frameworks is not importable); on a "
            "machine without Gaudi use --device cpu, or optimum_uag.testing.hpu_emulator.HPUEmulator for a dry-run"
        )
    from optimum.habana.transformers.generation import GaudiGenerationMixin
    from optimum.habana.transformers.modeling_utils import adapt_transformers_to_gaudi

    from .. import patch

    if patch.unwrapped_generate() is GaudiGenerationMixin.generate:
        return
    was_enabled = patch.is_enabled()
    patch.disable()
    adapt_transformers_to_gaudi()
    if was_enabled:
        patch.enable()


def enable() -> None:
    """adapt_transformers_to_gaudi() (if not done yet), then route generate(assistant_model=...) to optimum-uag."""
    from .. import patch
    from ..runners import register_plan_hook
    from .runner import gaudi_plan

    adapt()
    register_plan_hook(gaudi_plan)  # the engine asks registered backends first; it never imports this package
    patch.enable()


__all__ = ["GaudiModelRunner", "GaudiOptions", "adapt", "cache_mechanism", "enable", "pop_gaudi_options"]
