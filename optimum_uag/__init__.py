"""optimum-uag: speculative decoding with any draft model (Universal Assisted Generation)."""
from .models import embedded_models

__version__ = "0.1.0"
__all__ = ["embedded_models"]
