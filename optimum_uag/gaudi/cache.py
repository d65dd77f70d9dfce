"""The Gaudi runner's pooled KV caches: widths, the pool per model (bounded), FP8-safe moves."""
from __future__ import annotations

import torch

from ..registry import model_state


def _pool(model) -> dict:
    """Cache tensors this model's runners allocated, per (mechanism, batch, columns, dtype), kept across calls:
    an HPU graph captured in one call reads the tensors that existed at capture, so a later call of the same
    shape must use those very tensors, never a reallocated copy."""
    return model_state(model).setdefault("kv_pool", {})


def _bucketed(keep: int | None, length: int) -> int:
    """logits_to_keep rounded up to a power of two (capped at the block): an HPU graph is keyed by it, so callers'
    varying counts (a UAG draft's re-feed) make a few graphs, not one per count. The runner trims the rest."""
    if not keep or keep >= length:
        return 0 if not keep else length
    return min(length, 1 << (keep - 1).bit_length())


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` itself, or for a 1-byte float (FP8 KV caches under Intel Neural Compressor: float8_e4m3fn) a uint8
    view of it: moving entries is a bit copy, and gather / index_copy_ are not implemented for float8 everywhere
    (CPU: "not implemented for 'Float8_e4m3fn'")."""
    if tensor.dtype.is_floating_point and tensor.element_size() == 1:
        return tensor.view(torch.uint8)
    return tensor


MARGIN = 32  # columns beyond the logical capacity: the prompt's bucket padding, a verify block's RoPE rows, slack


def _width(max_len: int, bucket_size: int = 0, tight: bool = True) -> int:
    """Cache width for a logical capacity of `max_len` columns. The target's (tight): + MARGIN, a multiple of
    upstream's bucket_size when one is set, else of MARGIN (a bounded set of shapes, hence of graphs, within
    2 x MARGIN - 1 columns of what upstream allocates beside the verify block). A draft's: a power of two >= 1.5 x
    (a small model; a UAG draft's capacity varies per call and per window, its graphs should not)."""
    if not tight:
        return max(128, 1 << (max_len + max(64, max_len // 2) - 1).bit_length())
    step = bucket_size if bucket_size and bucket_size > 0 else MARGIN
    return -(-(max_len + MARGIN) // step) * step


POOLED = 4  # pooled caches kept per model (the least recently used one goes, with its graphs, past that)


def _pooled_width(model, mechanism, batch_size, dtype, needed: int) -> int:
    """The narrowest pooled cache of this model for (mechanism, batch, dtype) with `needed` to 2 x `needed`
    columns, else `needed`."""
    widths = [key[2] for key in _pool(model) if key[:2] == (mechanism, batch_size) and key[3] == dtype
              and needed <= key[2] < 2 * needed]
    return min(widths, default=needed)


def _evict(model, limit: int) -> None:
    """Past `limit` pooled caches, drop the least recently used ones with their HPU graphs and feature buffers: a
    long-lived process serving mixed shapes does not grow without bound."""
    state = model_state(model)
    pool = _pool(model)
    while len(pool) > limit:
        old = next(iter(pool))  # dicts keep insertion order; _allocate re-inserts a cache on use
        del pool[old]
        step = state.get("graph_steps", {}).pop(old, None)
        if step is not None and hasattr(step, "clear_cache"):
            step.clear_cache()
        state.get("feature_buffers", {}).pop(old, None)
