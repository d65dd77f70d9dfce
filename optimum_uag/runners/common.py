"""What a model's forward accepts, read once per model class."""
from __future__ import annotations

import inspect
from functools import lru_cache

import torch

PROMPT_BUCKET = 16  # prompt blocks of static-shape backends (and UAG draft prompts) round up to this


@lru_cache(maxsize=None)
def _params(cls) -> frozenset:
    """Named forward parameters; a subclass whose forward is only (*args, **kwargs) (a wrapper that calls
    super().forward) takes those of the first base class that names them."""
    for klass in cls.__mro__:
        forward = klass.__dict__.get("forward")
        if forward is None:
            continue
        try:
            params = inspect.signature(forward).parameters
        except (TypeError, ValueError):
            return frozenset()
        named = {n for n, p in params.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and n != "self"}
        if named:
            return frozenset(named)
    return frozenset()


def forward_params(model) -> frozenset:
    """Names of the keyword arguments `model.forward` takes (a PEFT wrapper passes them to its base model)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return _params(type(model)) | _params(type(base))


def accepts(model, name: str) -> bool:
    """True when `model.forward` names `name` (a bare **kwargs does not count)."""
    return name in forward_params(model)


def cache_argument(model) -> str | None:
    """The name under which `model.forward` takes its KV cache: `cache` (transformers 5.x), `past_key_values`
    (4.x), `past` (older custom code); None when it takes none."""
    return next((n for n in ("past_key_values", "cache", "past") if accepts(model, n)), None)


def returned_cache(out):
    """The KV cache a forward returned (`past_key_values` in transformers 4.x, `cache` in 5.x), or None."""
    past = getattr(out, "past_key_values", None)
    return past if past is not None else getattr(out, "cache", None)


class LogitsKeeper:
    """Ask the model for only the last `n` logits where it can (`logits_to_keep` / `num_logits_to_keep`),
    else slice its output: BLOOM and other older models take neither argument."""

    def __init__(self, model):
        self.name = next((n for n in ("logits_to_keep", "num_logits_to_keep") if accepts(model, n)), None)

    def kwargs(self, n: int) -> dict:
        return {self.name: n} if self.name and n else {}

    def __call__(self, logits: torch.Tensor, n: int) -> torch.Tensor:
        return logits[:, -n:] if n and logits.shape[1] > n else logits


def text_config(model):
    config = model.config
    return config.get_text_config() if hasattr(config, "get_text_config") else config


_WINDOW_KEYS = ("sliding_window", "window_size", "attention_window_size", "local_window_size", "attention_chunk_size")


def local_attention_sizes(model) -> list[int]:
    """Window-like sizes of the config (sliding windows, GPT-Neo local layers, chunked attention)."""
    config = text_config(model)
    if getattr(config, "use_sliding_window", True) is False and not getattr(config, "window_size", None):
        return []
    sizes = [getattr(config, k, None) for k in _WINDOW_KEYS]
    return [w for w in sizes if isinstance(w, int) and w > 0]


def last_hidden_state(out, hidden=True) -> torch.Tensor:
    """The target's features from an output computed with output_hidden_states=True: its last hidden states (after
    its final norm, as EAGLE reads them); with `hidden` a tuple of layer indices (a head with fused features,
    EAGLE-3), those layers' hidden states and then the last ones, concatenated (B, L, (m + 1) H)."""
    states = getattr(out, "hidden_states", None)
    if not states:
        raise NotImplementedError("the model returned no hidden_states; a feature draft head needs a target whose "
                                  "forward supports output_hidden_states")
    if isinstance(hidden, (tuple, list)) and hidden:
        return torch.cat([states[i] for i in hidden] + [states[-1]], dim=-1)
    return states[-1]
