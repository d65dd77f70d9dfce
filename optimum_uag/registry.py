"""State optimum-uag keeps per user object (runner choice, compiled steps, KV pools, HPU-graph marks,
quantization kind), off the user's objects: one weak-keyed registry, freed with the object."""
from __future__ import annotations

import contextvars
import weakref

# Set while optimum-uag calls a model's own generate() for itself (the runner probe): the routed generate() then
# runs the original directly, never the launcher's drafting (no recursion into the engine)
OWN_GENERATE = contextvars.ContextVar("optimum_uag_own_generate", default=False)

_STATE: "weakref.WeakKeyDictionary[object, dict]" = weakref.WeakKeyDictionary()


def model_state(obj) -> dict:
    """The dict optimum-uag keeps for `obj` (a model, a tokenizer); created on first use, dropped with `obj`."""
    state = _STATE.get(obj)
    if state is None:
        state = _STATE[obj] = {}
    return state


def forget(obj) -> None:
    """Drop everything kept for `obj` (pooled KV caches, compiled graphs, the runner choice)."""
    _STATE.pop(obj, None)


def cached_for_pair(a, b, key: str, compute):
    """compute() once per (a, b) pair of objects (tokenizers), kept weakly: dropped when either is."""
    per_a = model_state(a).setdefault(key, weakref.WeakKeyDictionary())
    try:
        return per_a[b]
    except KeyError:
        value = per_a[b] = compute()
        return value
