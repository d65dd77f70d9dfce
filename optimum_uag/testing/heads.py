"""An untrained feature head for any target (tests, the Gaudi class check): init_head's start, moved off its
near-identity so that drafts vary. Its drafts are mostly rejected; what it exercises is exactness."""
from __future__ import annotations

import torch


def untrained_head(model, draft_vocab: int | None = None, seed: int = 0, name: str = "test-target"):
    """A FeatureHead for `model` in the model's dtype: a random draft vocabulary of `draft_vocab` ids (None: the
    target's LM head), its layer's weights perturbed by N(0, 0.02)."""
    from ..training.feature import head_config, init_head

    torch.manual_seed(seed)
    ids = torch.randperm(model.config.vocab_size)[:draft_vocab].sort().values if draft_vocab else None
    head = init_head(model, head_config(model, draft_vocab, name), ids)
    with torch.no_grad():  # away from the near-identity start
        for p in head.layers.parameters():
            p.add_(0.02 * torch.randn_like(p))
    return head.eval().to(model.dtype)
