"""Verify stage: accept a prefix of the candidates (greedy match or lossless speculative sampling)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .processors import TargetScorer
from .sampling import LogitsWarper
from .state import DecodingState, Proposal
from .tree import same_prefix_columns, tree_accept


@dataclass
class Verdict:
    """Outcome of one verification: tokens[b, :accepted[b] + 1] are the row's new tokens."""

    tokens: torch.Tensor  # (B, K + 1) target ids: accepted draft tokens, then the target's own token
    accepted: torch.Tensor  # (B,) number of draft tokens accepted
    features: torch.Tensor | None = None  # (B, W, H) target's last hidden states over the verified block
    start: torch.Tensor | None = None  # (B,) slot of the block's first column


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
    draft_probs: torch.Tensor | None,
    valid: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> Verdict:
    """Lossless speculative sampling (Leviathan et al. 2023; Chen et al. 2023, Alg. 1), batched.

    Accept candidate i with probability min(1, p_i(x_i) / q_i(x_i)); at the first rejection sample from
    norm(max(p_i - q_i, 0)); when all are accepted sample the bonus token from p_K.
    target_probs: (B, K + 1, V); candidates: (B, K); draft_probs: (B, K, V), the distribution each candidate
    was drawn from, or None for a deterministic drafter (prompt lookup, text-level UAG): q is then a point mass,
    so x_i is accepted with probability p_i(x_i) and the residual is p_i without x_i (no one-hot vectors).
    """
    batch, k = candidates.shape
    index = candidates[..., None]
    p = target_probs[:, :k].gather(-1, index).squeeze(-1)
    q = torch.ones_like(p) if draft_probs is None else draft_probs.gather(-1, index).squeeze(-1)
    if valid is not None:  # no proposal at an invalid position: q = 0 there, so its residual is p itself
        q = q * valid
    u = torch.rand(p.shape, device=p.device, generator=generator)
    ok = (u * q < p) & (q > 0)  # u < p / q without dividing by q; q == 0 means no proposal
    accepted = ok.long().cumprod(1).sum(1)

    # Residual at the first rejected position; at position K it is p_K itself (q = 0 there).
    rows = torch.arange(batch, device=p.device)
    p_at = target_probs[rows, accepted]
    if draft_probs is None:  # remove the point mass of the rejected candidate (none past the last, or invalid)
        cand = torch.cat([candidates, candidates.new_zeros(batch, 1)], 1)[rows, accepted]
        mass_at = torch.cat([q, q.new_zeros(batch, 1)], 1)[rows, accepted]
        residual = p_at.scatter_add(-1, cand[:, None], -mass_at[:, None]).clamp_min(0)
    else:
        # only the row at the first rejection is read (no vocabulary-sized masking of the whole block)
        q_at = draft_probs[rows, accepted.clamp_max(k - 1)]
        keep = (accepted < k) & (valid[rows, accepted.clamp_max(k - 1)] if valid is not None else True)
        residual = (p_at - q_at * keep[:, None]).clamp_min(0)
    mass = residual.sum(-1, keepdim=True)
    # mass == 0 only when p == q there, where rejection has probability 0; fall back to p for safety.
    residual = torch.where(mass > 0, residual / mass.clamp_min(1e-30), p_at)
    bonus = torch.multinomial(residual, 1, generator=generator).squeeze(-1)

    tokens = torch.cat([candidates, candidates.new_zeros(batch, 1)], dim=1)
    tokens[rows, accepted] = bonus
    return Verdict(tokens=tokens, accepted=accepted)


class Verifier:
    """Verify stage: one target forward over [unprocessed committed tokens, candidates]; accept a prefix.

    With logits processors (`scorer`), the target's logits at each position are processed with that position's
    prefix first, so greedy picks and the distribution verified against are those of target-only generate().
    With `features`, the forward also returns the target's last hidden states (for a feature drafter; a tuple of
    layer indices: those layers' hidden states before them, for a head with fused features)."""

    def __init__(self, runner, warper: LogitsWarper | None, scorer: TargetScorer | None = None,
                 keep_scores: bool = False, features: bool | tuple = False):
        self.runner = runner
        self.warper = warper
        self.scorer = scorer
        self.keep_scores = keep_scores
        self.features = features
        self.last = None  # (scores, logits) of the last call, when keep_scores

    def __call__(self, state: DecodingState, proposal: Proposal) -> tuple[Verdict, torch.Tensor]:
        if proposal.tree is not None:
            return self._verify_tree(state, proposal)
        k = proposal.tokens.shape[1]
        width = state.prompt_len if state.round == 0 else 1
        start = state.length - width
        inputs = torch.cat([state.window(start, width), proposal.tokens], dim=1)
        features = None
        if self.features:
            logits, features = self.runner.forward(inputs, start, logits_to_keep=k + 1, hidden=self.features)
        else:
            logits = self.runner.forward(inputs, start, logits_to_keep=k + 1)
        finite = torch.isfinite(logits).all()
        if self.scorer is not None:
            scores = self.scorer(state, logits, proposal.tokens)  # warpers included when sampling
        elif self.warper is not None:
            scores = self.warper.scores(logits)
        else:
            scores = logits
        if self.keep_scores:
            self.last = (scores, logits)
        if self.warper is None:
            verdict = greedy_verify(scores, proposal.tokens, proposal.valid)
        else:
            verdict = speculative_sampling(torch.softmax(scores, -1), proposal.tokens, proposal.probs, proposal.valid)
        verdict.features, verdict.start = features, start
        return verdict, finite

    def _verify_tree(self, state: DecodingState, proposal: Proposal) -> tuple[Verdict, torch.Tensor]:
        """One forward over [root, tree nodes] (engine/tree.py); greedy: the deepest path the target agrees with;
        sampling: the path the target's own samples take. The accepted path's keys / values are moved to the slots
        after the root, as after a chain."""
        if self.scorer is not None or self.keep_scores:
            raise ValueError("draft trees verify without logits processors or output_scores; the engine drafts a "
                             "chain for these calls (draft_tree=False)")
        tree, nodes = proposal.tree, proposal.tokens
        n = nodes.shape[1]
        start = state.length - 1
        inputs = torch.cat([state.window(start, 1), nodes], dim=1)
        features = None
        if self.features:
            logits, features = self.runner.forward(inputs, start, logits_to_keep=n + 1, hidden=self.features, tree=tree)
        else:
            logits = self.runner.forward(inputs, start, logits_to_keep=n + 1, tree=tree)
        finite = torch.isfinite(logits).all()
        if self.warper is None:
            target_tokens = logits.argmax(-1)  # (B, N + 1)
        else:
            # sampling: one sample of the target's (warped) distribution at every node; the round follows the tree
            # while the node's sample is one of its children. Along the path taken every token is a fresh sample of
            # the target given the tokens before it, so the output has the target's own distribution (the drafted
            # children are point-mass proposals, accepted with the target's probability of them, SpecInfer-style)
            probs = self.warper.probs(logits)
            target_tokens = torch.multinomial(probs.reshape(-1, probs.shape[-1]), 1).reshape(probs.shape[:-1])
            # one sample per distinct prefix: a node that repeats another (a lookup branch beside a head node with
            # the same tokens) reads that node's sample (engine/tree.py same_prefix_columns)
            target_tokens = target_tokens.gather(1, same_prefix_columns(tree, nodes, proposal.valid))
        path = tree_accept(target_tokens, nodes, tree, proposal.valid)
        self.runner.keep_path(start, path.columns, path.accepted)
        batch = nodes.shape[0]
        tokens = torch.cat([nodes.gather(1, (path.columns - 1).clamp_min(0)), nodes.new_zeros(batch, 1)], 1)
        tokens.scatter_(1, path.accepted[:, None], target_tokens.gather(1, path.last[:, None]))
        verdict = Verdict(tokens=tokens, accepted=path.accepted, start=start)
        if features is not None:  # the root's and the path's features, in slot order after keep_path
            index = torch.cat([path.columns.new_zeros(batch, 1), path.columns], 1)
            verdict.features = features.gather(1, index[..., None].expand(-1, -1, features.shape[-1]))
        return verdict, finite
