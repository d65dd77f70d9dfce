"""What a model's forward accepts, read once per model class."""
from __future__ import annotations

import inspect
from functools import lru_cache

import torch


@lru_cache(maxsize=None)
def _params(cls) -> frozenset:
    try:
        params = inspect.signature(cls.forward).parameters
    except (TypeError, ValueError):
        return frozenset()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return frozenset(params) | {"**kwargs"}
    return frozenset(params)


def forward_params(model) -> frozenset:
    """Names of the keyword arguments `model.forward` takes ("**kwargs" when it takes any)."""
    return _params(type(model))


def accepts(model, name: str) -> bool:
    """True when `model.forward` names `name` explicitly (a bare **kwargs does not count)."""
    return name in forward_params(model)


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
