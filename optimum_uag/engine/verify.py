"""Verify stage: accept a prefix of the candidates (greedy match or lossless speculative sampling)."""
from __future__ import annotations

from dataclasses import dataclass

import torch
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


@dataclass
class Verdict:
    """Outcome of one verification: tokens[b, :accepted[b] + 1] are the row's new tokens."""

    tokens: torch.Tensor  # (B, K + 1) target ids: accepted draft tokens, then the target's own token
    accepted: torch.Tensor  # (B,) number of draft tokens accepted


def greedy_verify(target_logits: torch.Tensor, candidates: torch.Tensor, valid: torch.Tensor | None = None) -> Verdict:
    """Accept the longest prefix of candidates equal to the target's argmax; the next argmax is the bonus token.

    target_logits: (B, K + 1, V) logits at the positions predicting candidates[:, 0..K-1] and the bonus token.
    valid: optional (B, K) bool, False where a row has no real candidate (never accepted).
    """
    target_tokens = target_logits.argmax(-1)
    matches = candidates == target_tokens[:, :-1]
    if valid is not None:
        matches &= valid
    accepted = matches.long().cumprod(1).sum(1)
    return Verdict(tokens=target_tokens, accepted=accepted)


def speculative_sampling(
    target_probs: torch.Tensor,
    candidates: torch.Tensor,
    draft_probs: torch.Tensor,
    valid: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> Verdict:
    """Lossless speculative sampling (Leviathan et al. 2023; Chen et al. 2023, Alg. 1), batched.

    Accept candidate i with probability min(1, p_i(x_i) / q_i(x_i)); at the first rejection sample from
    norm(max(p_i - q_i, 0)); when all are accepted sample the bonus token from p_K.
    target_probs: (B, K + 1, V); candidates: (B, K); draft_probs: (B, K, V), the distribution each candidate
    was drawn from (one-hot for deterministic drafters).
    """
    batch, k = candidates.shape
    if valid is not None:  # no proposal at an invalid position: its residual is p itself
        draft_probs = draft_probs * valid[..., None]
    index = candidates[..., None]
    p = target_probs[:, :k].gather(-1, index).squeeze(-1)
    q = draft_probs.gather(-1, index).squeeze(-1)
    u = torch.rand(p.shape, device=p.device, generator=generator)
    ok = (u * q < p) & (q > 0)  # u < p / q without dividing by q; q == 0 means no proposal
    accepted = ok.long().cumprod(1).sum(1)

    # Residual at the first rejected position; at position K it is p_K itself (q = 0 there).
    q_ext = torch.cat([draft_probs, draft_probs.new_zeros(batch, 1, draft_probs.shape[-1])], dim=1)
    rows = torch.arange(batch, device=p.device)
    p_at = target_probs[rows, accepted]
    q_at = q_ext[rows, accepted]
    residual = (p_at - q_at).clamp_min(0)
    mass = residual.sum(-1, keepdim=True)
    # mass == 0 only when p == q there, where rejection has probability 0; fall back to p for safety.
    residual = torch.where(mass > 0, residual / mass.clamp_min(1e-30), p_at)
    bonus = torch.multinomial(residual, 1, generator=generator).squeeze(-1)

    tokens = torch.cat([candidates, candidates.new_zeros(batch, 1)], dim=1)
    tokens[rows, accepted] = bonus
    return Verdict(tokens=tokens, accepted=accepted)
