"""Prompt lookup decoding: propose the tokens that followed the latest earlier match of the last n-gram."""
from __future__ import annotations

import torch

from ..state import DecodingState, Proposal
from .base import Drafter


class PromptLookupDrafter(Drafter):
    """N-gram drafting from the row's own prompt and output. Proposals are deterministic (no draft distribution:
    the verifier accepts token x with probability p(x) when sampling, as vLLM's n-gram path)."""

    def __init__(self, max_ngram_size: int):
        self.max_ngram_size = max(1, max_ngram_size)
        self.matched = None  # (B,) the n of each row's match in the last proposal (0: none)

    def propose(self, state: DecodingState, k: int, periodic: bool = False) -> Proposal:
        """k tokens per row: those after the latest earlier match of the row's last n-gram (n = max_ngram_size
        down to 1), invalid where no n-gram matches or the continuation reaches the row's end. With `periodic`, a
        continuation that reaches the end repeats the span from the match to the end (the text so far is periodic
        there: `a b c a b` continues `c a b c ...`), so a repetition is proposed at any length; the proposal's
        `record` is then (the plain continuation's validity (B, k), its start (B,), -1 where none matched)."""
        tokens, length = state.tokens, state.length
        batch, capacity = tokens.shape
        best = torch.full((batch,), -1, dtype=torch.long, device=tokens.device)  # continuation start
        matched = torch.zeros_like(best)
        for n in range(self.max_ngram_size, 0, -1):
            last = state.window((length - n).clamp_min(0), n)
            windows = tokens.unfold(1, n, 1)  # (B, capacity - n + 1, n)
            starts = torch.arange(windows.shape[1], device=tokens.device)
            hit = (windows == last[:, None]).all(-1)
            hit &= (starts >= state.pad[:, None]) & (starts + n < length[:, None]) & ((length - n) >= state.pad)[:, None]
            latest = torch.where(hit, starts, -1).max(1).values
            found = (best < 0) & (latest >= 0)
            best = torch.where(found, latest + n, best)
            matched = torch.where(found, n, matched)
        self.matched = matched
        offsets = torch.arange(k, device=tokens.device)
        plain = (best[:, None] >= 0) & (best[:, None] + offsets < length[:, None])
        if periodic:  # the match ends before the row's end: period = length - best >= 1
            offsets = offsets % (length - best).clamp_min(1)[:, None]
        index = (best.clamp_min(0)[:, None] + offsets).clamp_max(capacity - 1)
        candidates = tokens.gather(1, index)
        valid = (best[:, None] >= 0) & (index < length[:, None])
        last_token = state.window(length - 1, 1)
        candidates = torch.where(valid, candidates, last_token)
        return Proposal(tokens=candidates, valid=valid, record=(plain, best) if periodic else None)
