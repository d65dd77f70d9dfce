"""The speculative decoding engine: draft / translate / verify / commit on static-shape caches."""
from .loop import AssistedGenerateOutput, assisted_generate
from .metrics import Metrics

__all__ = ["AssistedGenerateOutput", "Metrics", "assisted_generate"]
