"""Draft with an assistant model that shares the target's tokenizer (classic assisted generation)."""
from __future__ import annotations

import torch

from ...runners.registry import make_runner
from ..sampling import TokenSampler
from ..state import DecodingState, Proposal
from .base import Drafter, DraftStats, Picker, draft_loop, no_proposal


class ModelDrafter(Drafter):
    """Draft with an assistant model that shares the target's tokenizer (classic assisted generation).

    The assistant's static cache mirrors the target's slots. Each round it re-reads the last two committed
    tokens (one of them is new; re-writing an already cached slot is harmless), so its input width is fixed.
    """

    def __init__(self, assistant_model, state: DecodingState, capacity: int, vocab_size: int, sampler: TokenSampler,
                 confidence_threshold: float | None, runner_factory=make_runner, processors=None):
        self.runner = runner_factory(assistant_model, state.batch_size, capacity, state.pad, role="assistant")
        limit = getattr(assistant_model.config, "max_position_embeddings", None)
        # a draft with fewer positions than this call needs stops drafting there (the target goes on alone)
        self.limit = limit if isinstance(limit, int) and 0 < limit < capacity else None
        self.vocab_size = vocab_size
        self.processors = processors  # the target's logits processors (repetition_penalty, ...), or None
        self.sampler = sampler
        self.threshold = confidence_threshold
        # rounds since the draft last read the committed tokens (rounds without a draft, or past its limit): each
        # committed one token per row, so the next read starts that many slots earlier
        self.unread = 0

    def propose(self, state: DecodingState, k: int) -> Proposal:
        if self.limit is not None and int((state.length - state.pad).max()) + k > self.limit:
            self.unread += 1
            return no_proposal(state, 1)
        if state.round == 0:
            start, width = torch.zeros_like(state.length), state.prompt_len
        else:  # the last two committed tokens (the cache holds those before), and one more per unread round
            width = 2 + self.unread
            start = (state.length - width).clamp_min(0)  # (a finished row's length stopped: its draft is unused)
        self.unread = 0
        logits = self.runner.forward(state.window(start, width), start, logits_to_keep=1)[:, -1]
        pick = Picker(state, self.vocab_size, self.sampler, self.processors)
        tokens, dists = draft_loop(self.runner, logits, k, pick, state.length, self.threshold, state.done,
                                   state.draft_gate)
        return Proposal(tokens=tokens, probs=torch.stack(dists, 1) if dists[0] is not None else None)

    def skipped(self, state: DecodingState, verdict, n_new: torch.Tensor) -> None:
        self.unread += 1

    def stats(self) -> DraftStats:
        return DraftStats(shapes=sorted(self.runner.shapes), forwards=self.runner.calls)
