"""Compatibility names: the static per-row cache runner now lives in optimum_uag.runners."""
from .runners.static import RowStaticCache, StaticCacheRunner as ModelRunner, local_config

__all__ = ["ModelRunner", "RowStaticCache", "local_config"]
