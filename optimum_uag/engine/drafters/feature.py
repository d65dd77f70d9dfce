"""Feature-level drafting (EAGLE): a small head reads the target's own last hidden states, no draft model.

The head keeps a static KV cache on the target's slots: its entry at slot t is the pair (f_t, x_{t+1}) of the
target's feature at t and the token after it. Each round
  catch up   the pairs whose true features the last verify forward returned (one fixed-width block per round;
             columns past a row's end are junk that causality hides and the next writes overwrite)
  draft      from the output at the last true pair, k tokens, feeding each output back as the next feature
  commit     store the verified block's features (the verify forward returns them: no extra target forward)
Rollback is a position rewind, as for the static runners. Sampling is lossless: the head's distribution is zero
outside its draft vocabulary, a valid proposal for speculative sampling.
"""
from __future__ import annotations

import contextlib

import torch

from ...runners.common import PROMPT_BUCKET
from ...runners.packed import draft_bf16, packed_weights
from ..state import DecodingState, Proposal
from ..tree import Tree, TreeShape, ancestor_matrix
from .base import Drafter, DraftStats, Picker, draft_loop, no_proposal
from .feature_head import FeatureHead, embedding_checksum


# tokens (1 or 2) of a lookup continuation that must be the head's own first choices for it to be verified whole
# beside the tree: on SmolLM2 both beat the replacement of the weakest nodes and tie within noise; two widen half as
# many rounds (6% vs 14% of chat tree rounds; benchmarks/results/lookup_branch.json)
BRANCH_ENDORSE = 2
# the lookup branch grows only after whole acceptances of a continuation copied from the request (the prompt), not
# from the answer so far: an A/B option (benchmarks/bench_lookup_length.py --from_prompt), off
GROW_FROM_PROMPT_ONLY = False


def check_head_matches(head: FeatureHead, model) -> None:
    """Refuse a head trained for another target (shape, vocabulary, or the recorded embedding checksum)."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    want = head.config.get("target") or {}
    name = want.get("name_or_path", "another model")
    hidden, vocab = head.config["hidden_size"], head.config.get("vocab_size")
    problems = []
    if hidden != config.hidden_size:
        from ...training.feature import feature_width  # (a target that projects its output: OPT's project_out)

        if hidden != feature_width(model):
            problems.append(f"hidden size {hidden} != the target's {config.hidden_size}")
    if vocab is not None and head.lm_head is None and vocab != config.vocab_size:
        problems.append(f"vocabulary {vocab} != the target's {config.vocab_size}")
    embed = head.embed_tokens or model.get_input_embeddings()
    width = getattr(getattr(embed, "weight", None), "shape", (0, None))[-1]
    if head.embed_tokens is None and width is not None and width != head.embedding_size:
        problems.append(f"token embeddings {head.embedding_size} wide != the target's {width}")
    reads = getattr(model.get_output_embeddings(), "in_features", hidden)
    if head.lm_head is None and reads != hidden:
        problems.append(f"the target's LM head reads {reads} features, not its {hidden}-wide hidden states, and this "
                        "head has no LM head of its own (train-draft gives it one)")
    if want.get("vocab_size") is not None and want["vocab_size"] != config.vocab_size:
        problems.append(f"vocabulary {want['vocab_size']} != the target's {config.vocab_size}")
    if want.get("num_hidden_layers") is not None and want["num_hidden_layers"] != config.num_hidden_layers:
        problems.append(f"{want['num_hidden_layers']} layers != the target's {config.num_hidden_layers}")
    elif head.feature_layers and max(head.feature_layers) >= config.num_hidden_layers:
        problems.append(f"it fuses layers {head.feature_layers}, the target has {config.num_hidden_layers}")
    if not problems and want.get("embedding_checksum") is not None:
        got = embedding_checksum(model)
        if abs(got - want["embedding_checksum"]) > 5e-3 * max(1.0, abs(got)):
            problems.append("its embedding table differs (another checkpoint of the same shape)")
    if problems:
        raise ValueError(f"this feature head was trained for {name}, not for this {type(model).__name__}: "
                         f"{'; '.join(problems)}. Pass the head trained for this target (optimum-uag train-draft "
                         "--model_name_or_path <target> makes one)")


def _bucket(n: int, wide: bool = False) -> int:
    """n rounded up to a multiple of PROMPT_BUCKET, or with `wide` to a power of two (at least 128)."""
    return max(128, 1 << (n - 1).bit_length()) if wide else -(-n // PROMPT_BUCKET) * PROMPT_BUCKET


class FeatureDrafter(Drafter):
    """Drafts with a FeatureHead over the target's own features (see the module doc)."""

    needs_features = True

    def __init__(self, head: FeatureHead, model, state: DecodingState, capacity: int, vocab_size: int, sampler,
                 confidence_threshold: float | None, width: int, processors=None, tree: TreeShape | None = None,
                 branch_nodes: int = 0, branch_max: int = 0):
        check_head_matches(head, model)
        device, dtype = state.tokens.device, model.dtype
        self.head = head.to(device=device, dtype=dtype)
        self.embed = head.embed_tokens or model.get_input_embeddings()
        self.target_head = model.get_output_embeddings() if head.lm_head is None else None
        self.draft_ids = head.draft_ids()
        batch = state.batch_size
        self.width = width  # fixed catch-up width: at most k + 1 new true pairs per round
        # static shapes (HPU graphs / lazy-mode graphs, compile): the cache width and every catch-up wider than the
        # fixed one are rounded up (_bucket), so neither the prompt length nor max_new_tokens makes a new shape
        columns = _bucket(capacity + _bucket(max(width, state.prompt_len)) + PROMPT_BUCKET + 1, wide=True)
        self.tree = tree
        self.branch_nodes = branch_nodes  # verify nodes added for a lookup branch the head endorses (0: none)
        # the branch doubles (up to branch_max) after a round that accepted it whole, back to branch_nodes after one
        # that did not: a long copy of the request is verified in a few wide rounds, not one 8-token round each
        self.branch_max = max(branch_max, branch_nodes)
        self.branch_len = branch_nodes
        self.branch_whole = None  # (rows that accepted the last verified branch whole).any(), read with the next
        self.branch_verified = 0  # length of the branch in the round being verified (0: none)
        self.branch_rows = None  # its rows
        self.scratch = columns  # a tree's nodes keep their keys / values past the slots (depth x top_k of them)
        if tree is not None:
            columns += tree.depth * tree.top_k
        attn = head.attn
        self.cache_k = torch.zeros(batch, attn.kv_heads, columns, attn.head_dim, device=device, dtype=dtype)
        self.cache_v = torch.zeros_like(self.cache_k)
        # the target's features per slot: the final norm's output, or fused layers (EAGLE-3) for a head that reads them
        self.feature_layers = tuple(head.feature_layers)
        self.features = torch.zeros(batch, columns, head.feature_size, device=device, dtype=dtype)
        self.key_slots = torch.arange(columns, device=device)
        self.columns = columns
        self.pad = state.pad
        self.synced = torch.zeros_like(state.length)  # first slot whose true pair is not in the head's cache
        self.first = True  # the first catch-up writes the prompt's pairs
        self.unread = 0  # rounds without a draft since the last catch-up (one more pair per row each)
        self.pending: int | None = None  # new pairs of the last drafting round before those (adaptive, eager)
        self.vocab_size, self.sampler, self.threshold = vocab_size, sampler, confidence_threshold
        self.processors = processors
        self.last = None  # the head's latest output (B, 1, H): the feature of the next draft step
        self.shapes: set = set()
        self.calls = 0
        # CPU: prepacked linears, bfloat16 weights on the skinny kernel where it runs (runners/packed.py)
        self.pack = packed_weights(self.head, bf16=draft_bf16()) or contextlib.nullcontext()

    def _step(self, features, tokens, slots) -> torch.Tensor:
        self.shapes.add(tuple(tokens.shape))
        self.calls += 1
        keys, slots3 = self.key_slots, slots[:, :, None]
        # a query always sees its own slot (a padding column's query would otherwise see nothing: NaN)
        visible = ((keys >= self.pad[:, None, None]) & (keys <= slots3)) | (keys == slots3)
        positions = (slots - self.pad[:, None]).clamp_min(0)
        with self.pack:
            return self.head.step(features, self.embed(tokens), positions, self.cache_k, self.cache_v, slots,
                                  visible[:, None])

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Target-vocabulary logits (B, L, V): the draft vocabulary's, -inf elsewhere."""
        with self.pack:
            logits = self.head.logits(hidden, self.target_head).float()
        if self.draft_ids is None:
            return logits
        full = logits.new_full((*logits.shape[:-1], self.vocab_size), float("-inf"))
        return full.index_copy_(-1, self.draft_ids, logits)

    def forward(self, tokens: torch.Tensor, start: torch.Tensor, logits_to_keep: int = 1) -> torch.Tensor:
        """One draft step for draft_loop: the pair (last output, drafted token) at head slot start - 1."""
        self.last = self._step(self.last, tokens, (start - 1)[:, None])
        return self._logits(self.last)

    def _catch_up(self, state: DecodingState) -> None:
        """Write the pairs of true features not yet in the head's cache; leave the output at the last one. One block
        of the fixed width per round; after the prompt or rounds without a draft, one block as wide as the gap. On
        eager backends the block is as wide as the last drafting round committed: its fixed width is the longest
        acceptance (9 for a chain, 33 for a growing lookup branch), a head step over that many positions a row where
        1-3 are new."""
        if not self.first and state.round_max_new is not None:  # (host ints: the loop read them in its round sync)
            width = min(self.width, max(1, self.pending if self.unread else state.round_max_new)) + self.unread
        else:
            width = (state.prompt_len if self.first else self.width) + self.unread  # no host sync
            width = width if width == self.width else _bucket(width)  # the prompt's, or after rounds without a draft
        self.first, self.unread = False, 0
        slots = self.synced[:, None] + torch.arange(width, device=self.synced.device)
        slots = slots.clamp_max(self.columns - 1)
        feats = self.features.gather(1, slots[..., None].expand(-1, -1, self.features.shape[-1]))
        tokens = state.tokens.gather(1, (slots + 1).clamp_max(state.tokens.shape[1] - 1))
        hidden = self._step(feats, tokens, slots)
        n_true = (state.length - 1 - self.synced).clamp(1, width)  # pairs up to slot length - 2 are true
        self.last = hidden.gather(1, (n_true - 1)[:, None, None].expand(-1, 1, hidden.shape[-1]))
        self.synced = state.length - 1

    def idle(self, state: DecodingState):
        if state.round > 0:
            self._catch_up(state)

    def propose(self, state: DecodingState, k: int, branch=None) -> Proposal:
        """k tokens as a chain, or the call's draft tree (with `branch`, a chain grafted onto the root)."""
        if state.round == 0:  # no target features yet: the prefill verify computes them
            return no_proposal(state, k)
        self._catch_up(state)
        if self.tree is not None:
            return self._propose_tree(state, self.tree, branch)
        pick = Picker(state, self.vocab_size, self.sampler, self.processors)
        tokens, dists = draft_loop(self, self._logits(self.last)[:, -1], k, pick, state.length, self.threshold,
                                   state.done, state.draft_gate)
        return Proposal(tokens=tokens, probs=torch.stack(dists, 1) if dists[0] is not None else None)

    def _draft_logprobs(self, hidden: torch.Tensor) -> torch.Tensor:
        """Log-probabilities over the draft vocabulary (..., N) (the head's own rows, or the target's head)."""
        with self.pack:
            return torch.log_softmax(self.head.logits(hidden, self.target_head).float(), -1)

    def _target_ids(self, index: torch.Tensor) -> torch.Tensor:
        return index if self.draft_ids is None else self.draft_ids[index]

    def _propose_tree(self, state: DecodingState, shape: TreeShape, branch=None) -> Proposal:
        """EAGLE-2's dynamic tree: expand the top_k best frontier nodes per level (one head step over the frontier,
        explicit positions, a tree mask over the head's scratch slots), then keep the best `nodes` of every
        candidate by cumulative draft log-probability."""
        batch, width, device = state.batch_size, shape.top_k, state.tokens.device
        base = state.length - 2  # slot of the last true pair; a depth-d node's pair sits at base + d
        keys = self.key_slots
        committed = ((keys >= self.pad[:, None]) & (keys <= base[:, None]) & (keys < self.scratch))[:, None]
        score, index = self._draft_logprobs(self.last[:, -1]).topk(width, -1)  # (B, W)
        token = self._target_ids(index)
        hidden = self.last.expand(-1, width, -1)
        scratch = torch.zeros(batch, width, self.columns - self.scratch, dtype=torch.bool, device=device)
        pool_tokens, pool_scores, pool_parents = [token], [score], [torch.zeros_like(index)]
        pool_depths = [torch.ones_like(index)]
        frontier = torch.arange(1, width + 1, device=device).expand(batch, -1)  # pool ids (0 = the root)
        size = width
        for depth in range(1, shape.depth):
            column = (depth - 1) * width + torch.arange(width, device=device)
            scratch = scratch.clone()
            scratch[:, torch.arange(width, device=device), column] = True  # each node sees itself
            slots = (self.scratch + column).expand(batch, -1)
            mask = torch.cat([committed.expand(-1, width, -1)[..., : self.scratch], scratch], -1)
            positions = (base + depth - self.pad)[:, None].expand(-1, width)
            self.shapes.add((batch, width))
            self.calls += 1
            with self.pack:
                out = self.head.step(hidden, self.embed(token), positions, self.cache_k, self.cache_v, slots,
                                     mask[:, None])
            child_scores, child_index = self._draft_logprobs(out).topk(width, -1)  # (B, W, W)
            cumulative = (score[:, :, None] + child_scores).flatten(1)  # (B, W * W)
            children = self._target_ids(child_index).flatten(1)
            pool_tokens.append(children)
            pool_scores.append(cumulative)
            pool_parents.append(frontier[:, :, None].expand(-1, -1, width).flatten(1))
            pool_depths.append(torch.full_like(children, depth + 1))
            score, best = cumulative.topk(width, -1)
            parent = best // width
            token = children.gather(1, best)
            hidden = out.gather(1, parent[..., None].expand(-1, -1, out.shape[-1]))
            scratch = scratch.gather(1, parent[..., None].expand(-1, -1, scratch.shape[-1]))
            frontier = size + 1 + best
            size += children.shape[1]
        extend = None
        self.branch_verified = 0
        if branch is not None:
            # the n-gram continuation (B, L), its valid tokens (continued periodically where the branch can be
            # verified beside the tree) and those of the plain continuation: a replacement of the tree's weakest
            # nodes takes rows whose first branch_nodes plain tokens (all of them on static backends) are valid
            chain, chain_valid, plain_valid, start = branch  # (start: where each row's continuation begins)
            n = self.branch_nodes or chain.shape[1]
            rows = plain_valid[:, :n].all(1)
            branch = (chain, rows)
        if branch is not None and self.branch_nodes > 0:
            # a lookup continuation whose first BRANCH_ENDORSE tokens are the head's own first choices (its best
            # token, and that token's best child) is verified whole, beside the whole tree (a wider verify in those
            # rounds only): on input-grounded requests the n-gram copies run longer than the nodes - top_k a
            # replacement leaves it (benchmarks/bench_lookup_branch.py). One host read: eager backends only
            endorsed = chain_valid[:, :n].all(1) & ~state.done & (chain[:, 0] == pool_tokens[0][:, 0])
            if BRANCH_ENDORSE > 1 and len(pool_tokens) > 1 and chain.shape[1] > 1:
                endorsed &= chain[:, 1] == pool_tokens[1][:, 0]
            whole = self.branch_whole if self.branch_whole is not None else endorsed.new_zeros(())
            any_endorsed, grow = torch.stack([endorsed.any(), whole]).tolist()
            if self.branch_whole is not None:  # the last verified branch: accepted whole -> twice as long, else back
                self.branch_len = min(2 * self.branch_len, self.branch_max) if grow else self.branch_nodes
                self.branch_whole = None
            if any_endorsed:
                m = min(self.branch_len, chain.shape[1])
                extend = (chain[:, :m], chain_valid[:, :m] & endorsed[:, None])
                branch = (chain, rows & ~endorsed)
                if m > shape.depth:  # (a round can accept m tokens through the tree alone otherwise)
                    self.branch_verified, self.branch_rows = m, endorsed
                    if GROW_FROM_PROMPT_ONLY and start is not None:  # (a copy of the request)
                        self.branch_rows = endorsed & (start < state.prompt_len)
        proposal = self._select(pool_tokens, pool_scores, pool_parents, pool_depths, shape, branch)
        return proposal if extend is None else _with_branch(proposal, *extend)

    @staticmethod
    def _select(pool_tokens, pool_scores, pool_parents, pool_depths, shape: TreeShape, branch=None) -> Proposal:
        """The best `nodes` candidates (ancestors rank above descendants: a tiny per-depth penalty breaks ties),
        stored in pool order (parents before children), with their parents' block columns. `branch` (tokens
        (B, m), rows (B,) bool): a chain from the root (prompt lookup's n-gram continuation) that replaces the
        m lowest-ranked nodes of those rows (m <= nodes - top_k)."""
        tokens, parents, depths = (torch.cat(x, 1) for x in (pool_tokens, pool_parents, pool_depths))
        floor = torch.finfo(torch.float32).min / 4  # -inf / NaN draft scores (an overflowing fp16 head) rank last
        scores = torch.nan_to_num(torch.cat(pool_scores, 1).float(), nan=floor, neginf=floor) - 1e-4 * depths
        chosen = scores.topk(shape.nodes, -1).indices  # (B, N), best first
        max_depth = shape.depth
        if branch is not None:
            chain, rows = branch
            m = min(chain.shape[1], shape.nodes - shape.top_k)  # the head keeps at least its top_k first tokens
            size, device = tokens.shape[1], tokens.device
            steps = torch.arange(m, device=device)
            tokens = torch.cat([tokens, chain[:, :m]], 1)
            parents = torch.cat([parents, torch.where(steps == 0, 0, size + steps).expand(tokens.shape[0], -1)], 1)
            depths = torch.cat([depths, (steps + 1).expand(tokens.shape[0], -1)], 1)
            rank = torch.arange(shape.nodes, device=device)
            cut = shape.nodes - m
            chosen = torch.where(rows[:, None] & (rank >= cut), size + (rank - cut).clamp_min(0), chosen)
            max_depth = max(max_depth, m)
        chosen = chosen.sort(1).values  # pool order = parents before children
        batch, n = chosen.shape
        column = torch.full((batch, tokens.shape[1] + 1), -1, dtype=torch.long, device=tokens.device)
        column[:, 0] = 0
        column.scatter_(1, chosen + 1, torch.arange(1, n + 1, device=tokens.device).expand(batch, -1))
        parent_columns = column.gather(1, parents.gather(1, chosen))
        node_depths = depths.gather(1, chosen)
        # a node whose parent was not kept (only possible at equal scores on the floor) is never accepted: its
        # position (depth) would not match the column it hangs from
        valid = parent_columns >= 0
        tree = Tree(parents=parent_columns.clamp_min(0), depths=node_depths,
                    ancestors=ancestor_matrix(parent_columns.clamp_min(0), max_depth), max_depth=max_depth)
        return Proposal(tokens=tokens.gather(1, chosen), tree=tree, valid=valid)

    def commit(self, state: DecodingState, proposal: Proposal, verdict, n_new: torch.Tensor) -> None:
        """Keep the verified block's features at their slots (those past a row's accepted tokens are rewritten by
        the next verify before any pair reads them)."""
        if self.branch_verified:
            # (n_new, not this rank's verdict: ranks of a multi-card run take the same decision)
            self.branch_whole = ((n_new > self.branch_verified) & self.branch_rows).any()
            self.branch_verified = 0
        feats = verdict.features
        if feats.shape[-1] != self.features.shape[-1]:
            raise ValueError(f"this feature head reads {self.features.shape[-1]} features, the target's hidden states "
                             f"are {feats.shape[-1]} wide: the head was trained for another target (optimum-uag "
                             "train-draft --model_name_or_path <target> makes one)")
        slots = (verdict.start[:, None] + torch.arange(feats.shape[1], device=feats.device)).clamp_max(self.columns - 1)
        self.features.scatter_(1, slots[..., None].expand(-1, -1, feats.shape[-1]), feats.to(self.features.dtype))

    def skipped(self, state: DecodingState, verdict, n_new: torch.Tensor) -> None:
        """The round's features (of the target's own token) are kept; the next catch-up writes its pair."""
        self.commit(state, None, verdict, n_new)
        if self.unread == 0:  # the pairs still to write from the last drafting round (its count, where known)
            self.pending = state.round_max_new
        self.unread += 1

    def stats(self) -> DraftStats:
        return DraftStats(shapes=sorted(self.shapes), forwards=self.calls)


def _with_branch(proposal: Proposal, chain: torch.Tensor, chain_valid: torch.Tensor) -> Proposal:
    """The tree with a chain from the root appended as m more nodes (block columns N + 1 .. N + m): verified where
    `chain_valid` (B, m), invalid (never accepted) elsewhere."""
    tree, batch, n = proposal.tree, *proposal.tokens.shape
    m, device = chain.shape[1], chain.device
    steps = torch.arange(m, device=device)
    parents = torch.cat([tree.parents, torch.where(steps == 0, 0, n + steps).expand(batch, -1)], 1)
    depths = torch.cat([tree.depths, (steps + 1).expand(batch, -1)], 1)
    valid = proposal.valid if proposal.valid is not None else torch.ones_like(proposal.tokens, dtype=torch.bool)
    valid = torch.cat([valid, chain_valid], 1)
    max_depth = max(tree.max_depth, m)
    wide = Tree(parents=parents, depths=depths, ancestors=ancestor_matrix(parents, max_depth), max_depth=max_depth)
    return Proposal(tokens=torch.cat([proposal.tokens, chain], 1), tree=wide, valid=valid)
