"""Prompt lookup first, a draft (feature head or UAG model) where no n-gram matches: one drafter."""
from __future__ import annotations

import torch

from ..state import DecodingState, Proposal
from .base import Drafter, DraftStats


# the tree's lookup branch continues a repetition past the row's end (PromptLookupDrafter periodic=True): a small
# model's greedy loops, and lists or code that repeat a line, are proposed at the branch's full length
PERIODIC_BRANCH = True
# an A/B option, off (None): the tree's lookup branch taken from a datastore of the target's own answers (a head's
# `datastore`, drafters/datastore.py) rather than from the row's own prompt and output, "fallback" where the row has
# no n-gram match, "longer" also where the datastore's match is longer than the row's. On SmolLM2's chat requests
# with 186k tokens of its answers it did not pay (tau 2.449 -> 2.456 at a fixed policy; 1.38x -> 1.27-1.34x with the
# adaptive one; benchmarks/results/datastore.json)
DATASTORE_POLICY = None
# a datastore continuation may also replace the tree's weakest nodes where the head does not endorse it (as the row's
# own n-gram continuation does); False: it is only verified whole beside the tree, where the head endorses it
DATASTORE_REPLACES = True


class LookupThenDraft(Drafter):
    """Each round, n-gram lookup over the row's own prompt and output; when every active row has a full-length
    match, those candidates are verified and the draft only keeps its state in step (`idle`); otherwise the draft
    proposes, and with greedy decoding each row takes the lookup's candidates where its match is full-length.
    (With sampling the whole batch takes one kind: a lookup proposal has no draft distribution.)"""

    def __init__(self, lookup: Drafter, inner: Drafter, num_lookup_tokens: int, datastore=None):
        self.lookup, self.inner, self.num_lookup_tokens = lookup, inner, num_lookup_tokens
        self.datastore = datastore  # a Datastore of the target's own answers (tree branches only), or None
        self.needs_features = inner.needs_features
        self.feature_layers = getattr(inner, "feature_layers", ())

    def propose(self, state: DecodingState, k: int) -> Proposal:
        if getattr(self.inner, "tree", None) is not None and state.round > 0:
            # a draft tree: the n-gram continuation becomes a branch of the same tree (one verify for both)
            # (a branch verified beside the tree (eager) may grow, and continues a repetition periodically; one that
            # replaces the tree's weakest nodes keeps the plain continuation)
            longest = getattr(self.inner, "branch_max", 0)
            periodic = PERIODIC_BRANCH and longest > 0
            look = self.lookup.propose(state, max(self.num_lookup_tokens, longest), periodic=periodic)
            plain, start = look.record if periodic else (look.valid, None)
            if self.datastore is not None and DATASTORE_POLICY and longest > 0:  # (eager backends: one host read)
                look, plain, start = self._from_datastore(state, look, plain, start)
            mine = self.inner.propose(state, k, branch=(look.tokens, look.valid, plain, start))
            return Proposal(mine.tokens, valid=mine.valid, record=("inner", mine), tree=mine.tree)
        look = self.lookup.propose(state, max(k, self.num_lookup_tokens))
        full = look.valid.all(1) | state.done
        if state.round > 0 and bool(full.all()):
            return Proposal(look.tokens, valid=look.valid, record=("lookup", self.inner.idle(state)))
        mine = self.inner.propose(state, k)
        if mine.probs is not None or state.round == 0 or not bool((full & ~state.done).any()):
            # no row's n-gram matched in full: the draft's K tokens alone, not widened to the lookup's length (a
            # verify of 4 x (8 + 1) tokens for a chain of 3 cost batch 4 more than the chain earned)
            return Proposal(mine.tokens, mine.probs, mine.valid, record=("inner", mine))
        width = max(look.tokens.shape[1], mine.tokens.shape[1])
        tokens = torch.where(full[:, None], _widen(look.tokens, width), _widen(mine.tokens, width))
        mine_valid = mine.valid if mine.valid is not None else torch.ones_like(mine.tokens, dtype=torch.bool)
        valid = torch.where(full[:, None], _widen(look.valid, width, False), _widen(mine_valid, width, False))
        return Proposal(tokens, valid=valid, record=("inner", mine))

    def _from_datastore(self, state: DecodingState, look: Proposal, plain, start):
        """The branch of rows without an n-gram match of their own (DATASTORE_POLICY "longer": or with a shorter
        one) taken from the datastore's continuation of their last tokens."""
        width = look.tokens.shape[1]
        tokens, valid, n = self.datastore.propose(state.tokens, state.length, state.pad, width)
        own = self.lookup.matched  # the n of each row's own match (0: none)
        use = ((n > own) if DATASTORE_POLICY == "longer" else (n > 0) & (own == 0)) & ~state.done
        if not bool(use.any()):
            return look, plain, start
        tokens = torch.where(valid, tokens, state.window(state.length - 1, 1).expand(-1, width))
        chain = torch.where(use[:, None], tokens, look.tokens)
        chain_valid = torch.where(use[:, None], valid, look.valid)
        plain = torch.where(use[:, None], valid & DATASTORE_REPLACES, plain)
        if start is not None:  # (a continuation from the datastore is not a copy of the request)
            start = torch.where(use, state.tokens.shape[1], start)
        return Proposal(tokens=chain, valid=chain_valid, record=look.record), plain, start

    def commit(self, state: DecodingState, proposal: Proposal, verdict, n_new: torch.Tensor) -> None:
        kind, record = proposal.record
        inner = record if kind == "inner" else Proposal(tokens=proposal.tokens, record=record)
        self.inner.commit(state, inner, verdict, n_new)

    def skipped(self, state: DecodingState, verdict, n_new: torch.Tensor) -> None:
        self.inner.skipped(state, verdict, n_new)

    def stats(self) -> DraftStats:
        return self.inner.stats()


def _widen(x: torch.Tensor, width: int, fill=None) -> torch.Tensor:
    extra = width - x.shape[1]
    if extra <= 0:
        return x
    pad = x[:, -1:].expand(-1, extra) if fill is None else torch.full_like(x[:, :1], fill).expand(-1, extra)
    return torch.cat([x, pad], 1)
