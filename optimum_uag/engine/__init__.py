"""The speculative decoding engine: draft / translate / verify / commit on static-shape caches."""
from .loop import AssistedGenerateOutput, Metrics, assisted_generate

__all__ = ["AssistedGenerateOutput", "Metrics", "assisted_generate"]
