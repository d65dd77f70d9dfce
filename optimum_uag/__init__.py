"""optimum-uag: speculative decoding with any draft model (Universal Assisted Generation)."""
from .engine import AssistedGenerateOutput, Metrics, assisted_generate
from .models import embedded_models, eval_prompts, load_embedded
from .patch import disable, enable, is_enabled, last_metrics

__version__ = "0.1.0"
__all__ = [
    "AssistedGenerateOutput", "Metrics", "assisted_generate", "disable", "embedded_models", "enable", "eval_prompts", "load_embedded", "is_enabled",
    "last_metrics",
]
