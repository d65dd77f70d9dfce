"""Sampling helpers shared by the draft and verify stages: transformers' warpers, token picking, vocab fitting."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper


class LogitsWarper:
    """The sampling transforms transformers applies (temperature, top-k, top-p), shared by draft and target."""

    def __init__(self, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0):
        warpers = LogitsProcessorList()
        if temperature != 1.0:
            warpers.append(TemperatureLogitsWarper(temperature))
        if top_k:
            warpers.append(TopKLogitsWarper(top_k=top_k, min_tokens_to_keep=1))
        if top_p < 1.0:
            warpers.append(TopPLogitsWarper(top_p=top_p, min_tokens_to_keep=1))
        self.warpers = warpers

    def scores(self, logits: torch.Tensor) -> torch.Tensor:
        """Warped scores (..., V) in float32, as transformers' sampling computes them."""
        shape = logits.shape
        flat = logits.reshape(-1, shape[-1]).float()
        if len(self.warpers):
            flat = self.warpers(None, flat)
        return flat.reshape(shape)

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        """Probabilities (..., V) after the warpers, in float32."""
        return torch.softmax(self.scores(logits), dim=-1)


class TokenSampler:
    """Picks the next draft token: argmax (greedy) or a sample from the warped distribution."""

    def __init__(self, warper: LogitsWarper | None, need_confidence: bool):
        self.warper = warper
        self.need_confidence = need_confidence

    def __call__(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """(token (B,), its distribution (B, V) when sampling, the token's probability when needed)."""
        if self.warper is None:
            token = logits.argmax(-1)
            # the argmax's probability: one logsumexp (no full softmax written)
            conf = (logits.max(-1).values - torch.logsumexp(logits, -1)).exp() if self.need_confidence else None
            return token, None, conf
        probs = self.warper.probs(logits)
        token = torch.multinomial(probs, 1).squeeze(-1)
        conf = probs.gather(-1, token[:, None]).squeeze(-1) if self.need_confidence else None
        return token, probs, conf


def output_vocab_size(model) -> int:
    """Rows of the LM head (may exceed the tokenizer: padded embedding matrices), else config.vocab_size."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    rows = getattr(head, "out_features", None)  # quantized linears (INC, torch.ao) keep it; .weight may be a method
    if rows is None:
        weight = getattr(head, "weight", None)
        rows = weight.shape[0] if isinstance(weight, torch.Tensor) else None
    return int(rows) if rows is not None else int(model.config.vocab_size)


def fit_vocab(logits: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Slice or -inf-pad the last dimension to vocab_size (padded embedding matrices differ in size)."""
    extra = vocab_size - logits.shape[-1]
    if extra == 0:
        return logits
    if extra < 0:
        return logits[..., :vocab_size]
    return F.pad(logits, (0, extra), value=float("-inf"))
