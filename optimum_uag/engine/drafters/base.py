"""The Drafter interface every draft stage implements, and the autoregressive draft loop they share."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..sampling import fit_vocab
from ..state import DecodingState, Proposal


@dataclass
class DraftStats:
    """What a drafter reports at the end of a call."""

    shapes: list
    forwards: int = 0
    translate_seconds: float = 0.0  # spent translating inside propose/commit (UAG), counted apart from drafting


class Drafter:
    """Draft stage: `propose` up to k candidate target tokens per row; `commit` learns what the target accepted.

    propose(state, k) -> Proposal (its `record` carries whatever commit needs from that round);
    commit(state, proposal, verdict, n_new) after the target verified and the engine committed n_new tokens per row.
    `needs_features`: the verify forward must return the target's last hidden states (feature drafters)."""

    needs_features = False
    feature_layers: tuple = ()  # with needs_features: the target layers fused before its last hidden states

    def propose(self, state: DecodingState, k: int) -> Proposal:
        raise NotImplementedError

    def commit(self, state: DecodingState, proposal: Proposal, verdict, n_new: torch.Tensor) -> None:
        """Nothing to learn by default: a draft on the target's slots re-reads the committed tokens itself."""

    def skipped(self, state: DecodingState, verdict, n_new: torch.Tensor) -> None:
        """A round verified without a draft (the adaptive policy's choice): keep what the next propose() needs to
        catch up on the tokens committed meanwhile. Nothing by default (a drafter that re-reads the tokens)."""

    def idle(self, state: DecodingState):
        """A round whose candidates come from another drafter (prompt lookup): keep in step; returns the record
        commit() will get for it. Drafters that re-read the committed tokens need nothing."""
        return None

    def stats(self) -> DraftStats:
        return DraftStats(shapes=[])


def draft_loop(runner, logits: torch.Tensor, k: int, pick, positions: torch.Tensor,
               threshold: float | None, done: torch.Tensor, gate: float | None = None) -> tuple[torch.Tensor, list]:
    """Draft up to k tokens autoregressively from the first next-token logits (B, V).

    pick(logits) -> (token, distribution or None, confidence: the token's draft probability, or None); positions:
    (B,) slot of the first new token. Stops early when every active row's confidence is below `threshold` (the
    "confidence" schedule). With `gate` (the adaptive policy's, a chain's rounds; pick gives confidences), a token
    after the first is kept only while the active rows' mean cumulative draft probability (the chance the verify
    accepts it, for a calibrated draft) is at least `gate`: at batch > 1 one wide verify serves every row, so a
    position pays by the rows likely to reach it. The next step is not even run when the cumulative probability
    times the last token's (its likely successor's chance) falls below `gate`. The stop depends on the draft's own
    outputs only, so greedy stays exact and sampling lossless."""
    tokens, dists = [], []
    cumulative = live = None
    for i in range(k):
        token, dist, conf = pick(logits)
        if gate is not None:
            prob = conf.float()
            if cumulative is None:
                cumulative, live = prob, (~done).float()
            else:
                cumulative = cumulative * prob
                if bool((cumulative * live).sum() < gate * live.sum().clamp_min(1)):
                    break  # (one host read per drafted token: eager backends, where the adaptive policy runs)
        tokens.append(token)
        dists.append(dist)
        if i + 1 == k:
            break
        if threshold is not None and bool(((conf < threshold) | done).all()):
            break
        if gate is not None and bool((cumulative * prob * live).sum() < gate * live.sum().clamp_min(1)):
            break  # the next token would likely be cut (its chance read from this one's): its step is not run
        logits = runner.forward(token[:, None], positions + i, logits_to_keep=1)[:, -1]
    return torch.stack(tokens, 1), dists


class Picker:
    """Picks each draft token from target-vocabulary logits: the target's logits processors first (repetition
    penalty, ... as the verifier applies them, given the tokens drafted so far), then argmax or a sample."""

    def __init__(self, state: DecodingState, vocab_size: int, sampler, processors=None):
        self.state, self.vocab_size, self.sampler, self.processors = state, vocab_size, sampler, processors
        self.drafted: list[torch.Tensor] = []

    def __call__(self, logits: torch.Tensor):
        logits = fit_vocab(logits, self.vocab_size)
        if self.processors is not None:
            logits = self.processors(self.state, logits, torch.stack(self.drafted, 1) if self.drafted else None)
        out = self.sampler(logits)
        self.drafted.append(out[0])
        return out


def no_proposal(state: DecodingState, k: int) -> Proposal:
    """k invalid candidates per row: the round yields the target's own next token only."""
    last = state.window(state.length - 1, 1).expand(-1, k)
    return Proposal(tokens=last, valid=torch.zeros_like(last, dtype=torch.bool))


def pad_proposal(proposal: Proposal, width: int) -> Proposal:
    """Pad a proposal to `width` candidates, the extra ones invalid (static verify shape)."""
    tokens = proposal.tokens
    batch, k = tokens.shape
    if proposal.tree is not None:  # a tree has its fixed bucket of nodes
        return proposal
    valid = proposal.valid if proposal.valid is not None else torch.ones_like(tokens, dtype=torch.bool)
    if k >= width:
        return Proposal(tokens=tokens, probs=proposal.probs, valid=valid, record=proposal.record)
    extra = width - k
    tokens = torch.cat([tokens, tokens[:, -1:].expand(-1, extra)], 1)
    valid = torch.cat([valid, valid.new_zeros(batch, extra)], 1)
    probs = proposal.probs
    if probs is not None:
        probs = torch.cat([probs, probs[:, -1:].expand(-1, extra, -1)], 1)
    return Proposal(tokens=tokens, probs=probs, valid=valid, record=proposal.record)
