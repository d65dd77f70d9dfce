"""Tokenizer bridging for Universal Assisted Generation: vocabulary comparison and intersection maps."""
from __future__ import annotations

import json
from functools import lru_cache

import torch


def _pipeline(tokenizer) -> tuple:
    """The parts of a tokenizer that decide how text becomes ids (vocabulary aside)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return (type(tokenizer).__name__,)
    spec = json.loads(backend.to_str())
    model = {k: v for k, v in spec.get("model", {}).items() if k not in ("vocab", "merges")}
    return tuple(json.dumps(spec.get(key), sort_keys=True) for key in ("normalizer", "pre_tokenizer")) + (
        json.dumps(model, sort_keys=True),
    )


def same_vocabulary(tokenizer, assistant_tokenizer) -> bool:
    """True when both tokenizers map text to the same ids (same vocabulary and normalization), whatever their size."""
    if tokenizer is assistant_tokenizer:
        return True
    return tokenizer.get_vocab() == assistant_tokenizer.get_vocab() and _pipeline(tokenizer) == _pipeline(assistant_tokenizer)
