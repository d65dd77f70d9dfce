"""Dynamic draft trees (engine/tree.py): path acceptance, the tree verify on a real runner (the true branch hidden
among decoys is accepted to its full depth and leaves caches that decode on exactly), the feature head's EAGLE-2
trees exact against target-only generate() on batches, lookup branches, and the printed fallback to a chain."""
import warnings

import pytest
import torch

from optimum_uag import assisted_generate
from optimum_uag.engine.drafters import no_proposal
from optimum_uag.engine.state import DecodingState, Proposal
from optimum_uag.engine.tree import Tree, TreeShape, ancestor_matrix, tree_accept
from optimum_uag.engine.verify import Verifier
from optimum_uag.engine.commit import commit
from optimum_uag.engine.config import DEFAULT_TREE
from optimum_uag.runners.registry import make_runner

from test_engine import batch, reference
from test_feature_drafter import make_head


def _tree(parents, depth):
    parents = torch.tensor(parents)[None]
    depths = torch.zeros_like(parents)
    for i in range(parents.shape[1]):  # parents before children
        p = int(parents[0, i])
        depths[0, i] = 1 if p == 0 else int(depths[0, p - 1]) + 1
    return Tree(parents=parents, depths=depths, ancestors=ancestor_matrix(parents, depth), max_depth=depth)


def test_accept_takes_the_deepest_path_the_target_agrees_with():
    # root -> a(1), b(2); a -> c(3); b -> d(4), e(5); d -> f(6)
    tree = _tree([0, 0, 1, 2, 2, 4], 3)
    nodes = torch.tensor([[10, 20, 30, 40, 50, 60]])
    # target argmax per block column [root, a, b, c, d, e, f]: root->20 (b), b->40 (d), d->60 (f), f->7 (bonus)
    target = torch.tensor([[20, 99, 40, 99, 60, 99, 7]])
    path = tree_accept(target, nodes, tree)
    assert path.accepted.tolist() == [3] and path.last.tolist() == [6]
    assert path.columns.tolist() == [[2, 4, 6]]
    # a mismatch at d stops the path at b; the bonus is then the target's token at b
    target = torch.tensor([[20, 99, 41, 99, 60, 99, 7]])
    path = tree_accept(target, nodes, tree)
    assert path.accepted.tolist() == [1] and path.last.tolist() == [2]
    # nothing matches: only the target's own token (depth 0)
    path = tree_accept(torch.tensor([[5, 0, 0, 0, 0, 0, 0]]), nodes, tree)
    assert path.accepted.tolist() == [0] and path.last.tolist() == [0]


def test_tree_shape_is_validated():
    with pytest.raises(ValueError, match="tree_nodes=100 exceeds"):
        TreeShape(depth=2, top_k=2, nodes=100)
    with pytest.raises(ValueError, match="tree_depth must be an integer >= 1"):
        TreeShape(depth=0, top_k=2, nodes=2)


def test_tree_verify_accepts_the_true_branch_and_keeps_the_cache_exact(embedded, prompts):
    """A tree whose true branch (the target's own greedy continuation) sits behind decoys at every level: the verify
    accepts it to full depth, and after moving its keys / values decoding continues exactly as target-only."""
    model, tok = embedded["target"]
    ids, mask = batch(tok, [prompts[1], prompts[2][:60]])
    depth, n_new = 3, 12
    ref = reference(model, ids, mask, n_new, tok)
    prompt_len = ids.shape[1]
    pad = (mask == 0).sum(1)
    state = DecodingState.create(ids, pad, prompt_len + n_new + 16, tok.pad_token_id, n_new)
    runner = make_runner(model, 2, prompt_len + n_new + 16, pad)
    verifier = Verifier(runner, None)
    verdict, _ = verifier(state, no_proposal(state, 1))  # the prompt: one new token
    commit(state, verdict, None)
    state.round += 1
    true = ref[:, state.length[0] : state.length[0] + depth + 1]  # the next depth tokens + the bonus
    decoy = (true + 1) % model.config.vocab_size
    # root -> decoy(1), true1(2); true1 -> decoy(3), true2(4); true2 -> decoy(5), true3(6); decoy(1) -> true2(7)
    tree = _tree([0, 0, 2, 2, 4, 4, 1], depth)
    tree = Tree(parents=tree.parents.expand(2, -1), depths=tree.depths.expand(2, -1),
                ancestors=tree.ancestors.expand(2, -1, -1), max_depth=depth)
    nodes = torch.stack([decoy[:, 0], true[:, 0], decoy[:, 1], true[:, 1], decoy[:, 2], true[:, 2], true[:, 1]], 1)
    verdict, _ = verifier(state, Proposal(tokens=nodes, tree=tree))
    assert verdict.accepted.tolist() == [depth, depth]
    assert torch.equal(verdict.tokens, true)
    commit(state, verdict, None)
    state.round += 1
    while int(state.generated.min()) < n_new:  # then plain one-token rounds on the compacted cache
        verdict, _ = verifier(state, no_proposal(state, 1))
        commit(state, verdict, None)
        state.round += 1
    assert torch.equal(state.sequences()[:, : ref.shape[1]], ref)


def test_keep_path_moves_only_what_is_off_its_place(embedded):
    """The eager CPU runner's keep_path with the path's lengths moves only up to the last column that is off its
    slot (nothing for a path in place, or an empty one): the committed slots come out as the full fixed-size
    gather leaves them."""
    model, _ = embedded["target"]
    start = torch.tensor([5, 9, 7])
    cases = [([[1, 2, 3], [1, 2, 3], [1, 2, 3]], [3, 2, 0]),  # every path in place: no move
             ([[2, 4, 4], [1, 3, 3], [0, 0, 0]], [2, 2, 0]),  # moves in two rows, padding repeats the last column
             ([[1, 2, 6], [2, 2, 2], [1, 2, 3]], [3, 1, 2])]
    for columns, accepted in cases:
        runners = [make_runner(model, 3, 24, torch.zeros(3, dtype=torch.long)) for _ in range(2)]
        tokens = torch.randint(0, 50, (3, 16), generator=torch.Generator().manual_seed(0))
        for runner in runners:  # the same block: the same keys / values
            runner.forward(tokens, torch.zeros(3, dtype=torch.long))
        columns, accepted = torch.tensor(columns), torch.tensor(accepted)
        before = [layer.keys.clone() for layer in runners[1].cache.layers]
        runners[0].keep_path(start, columns)  # the fixed-size gather
        runners[1].keep_path(start, columns, accepted)
        moved = [not torch.equal(b, layer.keys) for b, layer in zip(before, runners[1].cache.layers)]
        if columns.tolist()[0] == [1, 2, 3]:  # every path in place: nothing moves at all
            assert not any(moved)
        if columns.tolist()[0] == [2, 4, 4]:  # row 0's slot 8 is past its 2 accepted: the gather's, not the trim's
            assert all(moved)
            for b, x, y in zip(before, runners[0].cache.layers, runners[1].cache.layers):
                assert torch.equal(y.keys[0, :, 8], b[0, :, 8]) and not torch.equal(x.keys[0, :, 8], b[0, :, 8])
        for a, b in zip(runners[0].cache.layers, runners[1].cache.layers):
            for row in range(3):
                kept = slice(0, int(start[row] + 1 + accepted[row]))  # committed: up to the path's last slot
                assert torch.equal(a.keys[row, :, kept], b.keys[row, :, kept])
                assert torch.equal(a.values[row, :, kept], b.values[row, :, kept])


@pytest.mark.parametrize("shape", [dict(), dict(tree_depth=4, tree_top_k=4, tree_nodes=12),
                                   dict(tree_depth=6, tree_top_k=3, tree_nodes=20)])
@pytest.mark.parametrize("lookup", [0, 6])
@pytest.mark.parametrize("draft_vocab", [None, 300])
def test_head_tree_matches_target_batch(embedded, prompts, shape, lookup, draft_vocab):
    model, tok = embedded["target"]
    head = make_head(model, draft_vocab)
    ids, mask = batch(tok, [prompts[0] * 2, prompts[3][:50], prompts[5]])
    out = assisted_generate(model, head, ids, mask, max_new_tokens=32, prompt_lookup_num_tokens=lookup,
                            draft_tree=True, **shape)
    assert torch.equal(out.sequences, reference(model, ids, mask, 32, tok))
    nodes = shape.get("tree_nodes", DEFAULT_TREE.nodes)
    assert (3, nodes + 1) in out.metrics.target_shapes  # the verify ran the tree's bucket


def test_batches_draft_a_chain_on_a_cpu_unless_a_tree_is_asked_for(embedded, prompts):
    """The automatic choice at batch > 1 on a CPU is a chain (B x (nodes + 1) verify tokens cost more than the tree
    gains there); draft_tree=True still drafts the tree."""
    model, tok = embedded["target"]
    head = make_head(model, 300)
    ids, mask = batch(tok, prompts[:2])
    auto = assisted_generate(model, head, ids, mask, max_new_tokens=8)
    assert auto.metrics.tree_rounds == 0
    forced = assisted_generate(model, head, ids, mask, max_new_tokens=8, draft_tree=True)
    assert forced.metrics.tree_rounds > 0 and torch.equal(forced.sequences, auto.sequences)


def test_a_heads_batch_chain_on_a_cpu_drafts_without_the_default_ngrams(embedded, prompts):
    """At batch > 1 on a CPU the head's chain runs without the n-grams put in front of it by default (a round where
    one row matches would verify B x (lookup + 1) tokens); asked for, they stay."""
    model, tok = embedded["target"]
    head = make_head(model, 300)
    ids, mask = batch(tok, [prompts[0] * 2, prompts[2] * 2])
    ref = reference(model, ids, mask, 24, tok)
    auto = assisted_generate(model, head, ids, mask, max_new_tokens=24, num_assistant_tokens=2, draft_policy="fixed")
    asked = assisted_generate(model, head, ids, mask, max_new_tokens=24, num_assistant_tokens=2, draft_policy="fixed",
                              prompt_lookup_num_tokens=8)
    assert torch.equal(auto.sequences, ref) and torch.equal(asked.sequences, ref)
    assert (2, 9) not in auto.metrics.target_shapes and (2, 9) in asked.metrics.target_shapes


def test_tree_is_used_by_default_and_num_assistant_tokens_fixes_a_chain(embedded, prompts):
    model, tok = embedded["target"]
    head = make_head(model, 300)
    ids, mask = batch(tok, prompts[:1])
    tree = assisted_generate(model, head, ids, mask, max_new_tokens=12)
    chain = assisted_generate(model, head, ids, mask, max_new_tokens=12, num_assistant_tokens=3,
                              prompt_lookup_num_tokens=0)
    width = DEFAULT_TREE.nodes + 1
    assert (1, width) in tree.metrics.target_shapes
    assert (1, 4) in chain.metrics.target_shapes and (1, width) not in chain.metrics.target_shapes
    forced = assisted_generate(model, head, ids, mask, max_new_tokens=12, num_assistant_tokens=3, draft_tree=True,
                               tree_nodes=8)
    assert (1, 9) in forced.metrics.target_shapes
    with pytest.raises(ValueError, match="draft_tree must be True, False or None"):
        assisted_generate(model, head, ids, mask, max_new_tokens=4, draft_tree="yes")


@pytest.mark.parametrize("curve, head_cost, expected", [
    # an Intel Xeon's curve (kernels switch at 4 rows; verify_cost_intel.json), SmolLM2's head (0.074 of its weights)
    ({1: 1.0, 3: 1.10, 6: 1.42}, 0.074, (1, 2, 2)),
    # a flat curve and a head 2% of its target's weights (a large target): the wider tree's tau pays
    ({1: 1.0, 3: 1.0, 6: 1.02}, 0.02, (3, 2, 5)),
    # an AMD EPYC's (6 tokens 1.03; feature_head.json): (1, 2, 2) ahead by < 5%, within noise: the default stays
    ({1: 1.0, 3: 1.0, 6: 1.03}, 0.074, (3, 2, 5)),
])
def test_the_default_tree_follows_the_devices_verify_cost(embedded, prompts, monkeypatch, curve, head_cost, expected):
    """On a CPU the default tree is the candidate (config.DEVICE_TREES) with the best expected rate under the verify
    cost curve measured here (engine/loop.py _device_tree; the curve measured once per model and batch); a tree shape
    given, or OPTIMUM_UAG_DEVICE_TREE=0, keeps what was asked. Exact either way."""
    import optimum_uag.runners.cost as cost
    from optimum_uag.registry import model_state

    model, tok = embedded["target"]
    head = make_head(model, 300)
    ids, mask = batch(tok, prompts[:1])
    ref = reference(model, ids, mask, 16, tok)
    measured = []

    def seconds(model_, batch_size, widths, context, reps, make=None):
        measured.append(list(widths))
        return {w: curve[w] * 0.01 for w in widths}

    monkeypatch.setattr(cost, "_interleaved_seconds", seconds)
    monkeypatch.setenv("OPTIMUM_UAG_DEVICE_TREE", "1")
    for key in [k for k in model_state(model) if isinstance(k, tuple) and k[0] == "verify_curve"]:
        model_state(model).pop(key)
    depth, top_k, nodes = expected
    monkeypatch.setattr("optimum_uag.engine.loop.cost_prior", lambda m, a: head_cost)
    for _ in range(2):
        out = assisted_generate(model, head, ids, mask, max_new_tokens=16, draft_policy="fixed")
        assert torch.equal(out.sequences, ref)
        assert out.metrics.tree_shapes == [(depth, top_k, nodes)] and (1, nodes + 1) in out.metrics.target_shapes
    assert measured == [[1, 3, 6]]  # measured once for the model and batch
    given = assisted_generate(model, head, ids, mask, max_new_tokens=16, draft_policy="fixed", tree_nodes=4)
    assert given.metrics.tree_shapes == [(DEFAULT_TREE.depth, DEFAULT_TREE.top_k, 4)]
    monkeypatch.setenv("OPTIMUM_UAG_DEVICE_TREE", "0")
    fixed = assisted_generate(model, head, ids, mask, max_new_tokens=16, draft_policy="fixed")
    assert fixed.metrics.tree_shapes == [(DEFAULT_TREE.depth, DEFAULT_TREE.top_k, DEFAULT_TREE.nodes)]
    assert torch.equal(given.sequences, ref) and torch.equal(fixed.sequences, ref)


def test_the_devices_tree_is_measured_on_the_real_runner(embedded, prompts, monkeypatch):
    """The measurement itself (no stand-in): run once on the call's runner factory, a real curve kept for the model,
    one of the candidates drafted, the output exact; a measurement that fails leaves the default tree, with a
    warning."""
    import optimum_uag.runners.cost as cost
    from optimum_uag.engine.config import DEVICE_TREES
    from optimum_uag.registry import model_state

    model, tok = embedded["target"]
    head = make_head(model, 300)
    ids, mask = batch(tok, prompts[1:2])
    monkeypatch.setenv("OPTIMUM_UAG_DEVICE_TREE", "1")
    state = model_state(model)
    for key in [k for k in state if isinstance(k, tuple) and k[0] == "verify_curve"]:
        state.pop(key)
    real, calls = cost._interleaved_seconds, []

    def spy(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(cost, "_interleaved_seconds", spy)
    for _ in range(2):
        out = assisted_generate(model, head, ids, mask, max_new_tokens=16)
        assert torch.equal(out.sequences, reference(model, ids, mask, 16, tok))
    assert len(calls) == 1 and calls[0][5] is not None  # once, on the call's own factory
    curves = [v for k, v in state.items() if isinstance(k, tuple) and k[0] == "verify_curve"]
    assert len(curves) == 1 and curves[0][1] == 1.0
    assert all(0 < v < float("inf") for v in curves[0].values()) and set(curves[0]) == {1, 3, 6}
    shapes = {(s.depth, s.top_k, s.nodes) for s, _, _ in DEVICE_TREES}
    assert set(out.metrics.tree_shapes) <= shapes and out.metrics.tree_rounds > 0

    failed = []

    def fails(*args, **kwargs):
        failed.append(args)
        raise RuntimeError("no room")

    for key in [k for k in state if isinstance(k, tuple) and k[0] == "verify_curve"]:
        state.pop(key)
    monkeypatch.setattr(cost, "_interleaved_seconds", fails)
    with pytest.warns(UserWarning, match="could not measure this device's verify cost"):
        out = assisted_generate(model, head, ids, mask, max_new_tokens=16)
    assert out.metrics.tree_shapes == [(DEFAULT_TREE.depth, DEFAULT_TREE.top_k, DEFAULT_TREE.nodes)]
    assert torch.equal(out.sequences, reference(model, ids, mask, 16, tok))
    with warnings.catch_warnings():  # a failed measurement is not run again at the next call
        warnings.simplefilter("ignore")
        out = assisted_generate(model, head, ids, mask, max_new_tokens=16)
    assert len(failed) == 1 and torch.equal(out.sequences, reference(model, ids, mask, 16, tok))


def test_fallback_to_a_chain_is_printed(embedded, prompts):
    """Logits processors (a tree node would need its own ancestors' prefix) and a draft model draft a chain and say
    so."""
    model, tok = embedded["target"]
    head = make_head(model, 300)
    ids, mask = batch(tok, prompts[:1])
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        out = assisted_generate(model, head, ids, mask, max_new_tokens=8, repetition_penalty=1.3)
    assert any("drafting a chain instead of a tree: logits processors" in str(w.message) for w in seen)
    assert torch.equal(out.sequences, model.generate(ids, attention_mask=mask, max_new_tokens=8, do_sample=False,
                                                     repetition_penalty=1.3, pad_token_id=tok.pad_token_id))
    assert (1, DEFAULT_TREE.nodes + 1) not in out.metrics.target_shapes
    draft, _ = embedded["assistant_same_tokenizer"]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        out = assisted_generate(model, draft, ids, mask, max_new_tokens=8, draft_tree=True)
    assert any("only a feature head drafts a tree" in str(w.message) for w in seen)
    assert torch.equal(out.sequences, reference(model, ids, mask, 8, tok))


def test_non_finite_draft_scores_never_make_an_orphan_acceptable():
    """-inf / NaN draft scores (an overflowing half-precision head) can rank a child without its parent: such a node
    is proposed invalid (its position would not match where it hangs), so the verify never accepts it."""
    from optimum_uag.engine.drafters.feature import FeatureDrafter

    level1 = torch.tensor([[-1.0, float("-inf")]])
    level2 = torch.tensor([[-1.5, -2.0, float("nan"), float("-inf")]])
    tokens = [torch.tensor([[11, 12]]), torch.tensor([[21, 22, 23, 24]])]
    parents = [torch.tensor([[0, 0]]), torch.tensor([[1, 1, 2, 2]])]
    depths = [torch.ones(1, 2, dtype=torch.long), torch.full((1, 4), 2)]
    proposal = FeatureDrafter._select(tokens, [level1, level2], parents, depths, TreeShape(depth=2, top_k=2, nodes=4))
    tree = proposal.tree
    for i in range(4):  # every valid node's parent is kept, and its depth is its parent's + 1
        if proposal.valid[0, i]:
            p = int(tree.parents[0, i])
            assert (p == 0 and tree.depths[0, i] == 1) or tree.depths[0, i] == tree.depths[0, p - 1] + 1
    orphans = ~proposal.valid[0]
    assert orphans.any()  # the NaN / -inf child of the unkept -inf parent
    orphan = int(orphans.nonzero()[0, 0])
    # the target's argmax at the root equals the orphan's token (it hangs from the root after the clamp)
    target = torch.full((1, 5), -1, dtype=torch.long)
    target[0, 0] = proposal.tokens[0, orphan]
    path = tree_accept(target, proposal.tokens, tree, proposal.valid)
    assert orphan + 1 not in path.columns[0, : int(path.accepted[0])].tolist()
    assert int(path.accepted[0]) == 0 or bool(proposal.valid[0, path.columns[0, 0] - 1])


@pytest.mark.slow
def test_head_tree_under_torch_compile(embedded, prompts):
    """The compiled static runner takes the tree block (one graph for the bucket): the same tokens and verdicts."""
    model, tok = embedded["target"]
    head = make_head(model, 300)
    ids, mask = batch(tok, prompts[:2])
    eager = assisted_generate(model, head, ids, mask, max_new_tokens=16, tree_nodes=8, tree_depth=3, tree_top_k=3,
                              draft_policy="fixed")  # every round a tree, as the compiled runner (one verify width)
    compiled = assisted_generate(model, head, ids, mask, max_new_tokens=16, tree_nodes=8, tree_depth=3, tree_top_k=3,
                                 torch_compile={"mode": None, "freezing": False})
    assert torch.equal(compiled.sequences, reference(model, ids, mask, 16, tok))
    assert compiled.metrics.accepted_tokens == eager.metrics.accepted_tokens
    assert compiled.metrics.tree_rounds == compiled.metrics.target_calls - 1


@pytest.mark.parametrize("kwargs", [dict(), dict(temperature=0.7, top_k=5, top_p=0.9), dict(prompt_lookup_num_tokens=3)])
def test_tree_sampling_matches_target_distribution(kwargs):
    """Sampling over a draft tree (the target's sample at every node, the tree followed while it matches a child):
    the joint distribution of the first two new tokens is the target's own (chi-square, p > 0.01), with the
    head's reduced vocabulary (6 of 8 tokens) and with a lookup branch."""
    from test_engine import _chi2, _joint_first_two, _sharp_llama

    from optimum_uag.engine.sampling import LogitsWarper

    vocab, n = 8, 6000
    model = _sharp_llama(vocab, 0, 4.0)
    head = make_head(model, 6, seed=3)
    with torch.no_grad():
        head.lm_head.weight.mul_(4.0)
    prompt = torch.tensor([[1, 2, 3, 1, 2]])
    warper = LogitsWarper(kwargs.get("temperature", 1.0), kwargs.get("top_k", 0), kwargs.get("top_p", 1.0))
    expected = _joint_first_two(model, prompt, warper)
    torch.manual_seed(4321)
    options = {key: value for key, value in kwargs.items() if key != "top_k"}
    out = assisted_generate(model, head, prompt.repeat(n, 1), max_new_tokens=3, do_sample=True, eos_token_id=None,
                            top_k=kwargs.get("top_k", 0), tree_depth=3, tree_top_k=2, tree_nodes=6,
                            draft_policy="fixed", **options)  # a tree every round (3 rounds)
    assert out.metrics.tree_rounds > 0 and (n, 7) in out.metrics.target_shapes
    samples = (out.sequences[:, 5] * vocab + out.sequences[:, 6]).numpy()
    assert _chi2(samples, expected, n) > 0.01
    assert out.metrics.accepted_tokens > 0


def _two_token_oracle(monkeypatch, ref):
    """The head scores the target's greedy tokens first for its first two tokens (the root's children, and the best
    node's best child): the tree alone accepts two tokens per round, and it endorses every true lookup branch."""
    from optimum_uag.engine.drafters.feature import FeatureDrafter

    propose, logprobs = FeatureDrafter.propose, FeatureDrafter._draft_logprobs

    def seen(self, state, k, branch=None):
        self.seen_state = state
        return propose(self, state, k, branch)

    def oracle(self, hidden):
        out = logprobs(self, hidden)
        length = self.seen_state.length
        if hidden.dim() == 2:  # the root's children: the target's next token first
            out = out.scatter(1, ref.gather(1, length.clamp_max(ref.shape[1] - 1)[:, None]), 10.0)
        elif out.shape[1] == DEFAULT_TREE.top_k:  # depth 2: the best node's best child is the target's token after it
            best = out[:, 0].scatter(1, ref.gather(1, (length + 1).clamp_max(ref.shape[1] - 1)[:, None]), 10.0)
            out = torch.cat([best[:, None], out[:, 1:]], 1)
        return out

    monkeypatch.setattr(FeatureDrafter, "propose", seen)
    monkeypatch.setattr(FeatureDrafter, "_draft_logprobs", oracle)


def test_a_lookup_branch_the_head_endorses_is_verified_whole(embedded, prompts, monkeypatch):
    """Where the n-gram continuation starts with the head's own first choices (its best token and that token's best
    child), it is verified whole beside the tree (nodes + lookup columns; a replacement of the tree's weakest nodes
    would cap it at nodes - top_k tokens): on text that repeats itself the rounds accept past the tree's depth, and
    the output stays the target's own. The head here is an oracle for its first two tokens only (the target's greedy
    tokens, scored first), so the tree alone accepts two tokens per round."""
    model, tok = embedded["target"]
    head = make_head(model, None)
    ids, mask = batch(tok, [prompts[0] * 2 + prompts[0][:40]])
    ref = reference(model, ids, mask, 32, tok)
    _two_token_oracle(monkeypatch, ref)
    runs = {lookup: assisted_generate(model, head, ids, mask, max_new_tokens=32, prompt_lookup_num_tokens=lookup,
                                      draft_tree=True, draft_policy="fixed") for lookup in (0, 6)}
    for out in runs.values():
        assert torch.equal(out.sequences, ref)
    width = DEFAULT_TREE.nodes + 1
    assert (1, width + 6) in runs[6].metrics.target_shapes and (1, width + 6) not in runs[0].metrics.target_shapes
    assert runs[6].metrics.tau > runs[0].metrics.tau + 0.5


@pytest.mark.parametrize("policy", ["fixed", "adaptive"])
def test_the_default_lookup_branch_doubles_while_rounds_accept_it_whole(embedded, prompts, monkeypatch, policy):
    """The default branch (prompt_lookup_num_tokens unset: HEAD_LOOKUP_TOKENS) doubles after a round that accepted
    it whole, up to HEAD_LOOKUP_MAX_TOKENS, and goes back after one that did not: on a repetition (the embedded
    target's greedy loop of a docstring line, continued periodically) the verify widens to nodes + 16 and + 32
    columns and the rounds accept more than the fixed 8-token branch can; the output is the target's own. An
    explicit prompt_lookup_num_tokens=8 keeps its length."""
    from optimum_uag.engine.config import HEAD_LOOKUP_MAX_TOKENS, HEAD_LOOKUP_TOKENS
    from optimum_uag.engine.drafters import feature

    model, tok = embedded["target"]
    head = make_head(model, None)
    ids, mask = batch(tok, [prompts[0] * 4])
    ref = reference(model, ids, mask, 96, tok)
    _two_token_oracle(monkeypatch, ref)
    with_branch, lengths = feature._with_branch, []

    def logged(proposal, chain, chain_valid):
        lengths.append(chain.shape[1])
        return with_branch(proposal, chain, chain_valid)

    monkeypatch.setattr(feature, "_with_branch", logged)
    runs = {}
    for lookup in (None, HEAD_LOOKUP_TOKENS):
        lengths.clear()
        runs[lookup] = assisted_generate(model, head, ids, mask, max_new_tokens=96, prompt_lookup_num_tokens=lookup,
                                         draft_tree=True, draft_policy=policy)
        if lookup is None:  # 8, then 16 right after (the 8 accepted whole), then 32
            grown = list(lengths)
            first = grown.index(2 * HEAD_LOOKUP_TOKENS)
            assert grown[first - 1] == HEAD_LOOKUP_TOKENS and HEAD_LOOKUP_MAX_TOKENS in grown[first:]
        else:
            assert set(lengths) == {HEAD_LOOKUP_TOKENS}
    for out in runs.values():
        assert torch.equal(out.sequences, ref)
    width = DEFAULT_TREE.nodes + 1
    shapes = {lookup: {n for _, n in out.metrics.target_shapes} for lookup, out in runs.items()}
    assert width + HEAD_LOOKUP_TOKENS in shapes[None]
    assert {width + 2 * HEAD_LOOKUP_TOKENS, width + HEAD_LOOKUP_MAX_TOKENS} <= shapes[None]
    assert max(n for n in shapes[HEAD_LOOKUP_TOKENS] if n < ids.shape[1]) == width + HEAD_LOOKUP_TOKENS
    assert runs[None].metrics.target_calls < runs[HEAD_LOOKUP_TOKENS].metrics.target_calls
    assert runs[None].metrics.tau > runs[HEAD_LOOKUP_TOKENS].metrics.tau + 0.5


def test_duplicate_prefixes_share_one_column():
    """root -> a(1), b(2), a(3); a(1) -> c(4); a(3) -> c(5), d(6); b(2) -> c(7). Sampling reads one target sample
    per distinct prefix (column 3 reads 1's, column 5 reads 4's), never an invalid column's."""
    from optimum_uag.engine.tree import same_prefix_columns

    tree = _tree([0, 0, 0, 1, 3, 3, 2], 2)
    a, b, c, d = 10, 11, 12, 13
    nodes = torch.tensor([[a, b, a, c, c, d, c]])
    assert same_prefix_columns(tree, nodes).tolist() == [[0, 1, 2, 1, 4, 4, 6, 7]]
    valid = torch.tensor([[False, True, True, True, True, True, True]])  # column 1 invalid: never read by 3
    assert same_prefix_columns(tree, nodes, valid).tolist() == [[0, 1, 2, 3, 4, 5, 6, 7]]


def test_tree_sampling_with_a_repeated_node_keeps_the_target_distribution():
    """A lookup branch beside the head's tree can repeat a head node (same token, same parent). With one target sample
    per node, the round would take whichever copy goes deeper, favouring drafted tokens (here the second token would be
    the branch's c' ~48% of the time instead of 30%); with one sample per distinct prefix the accepted tokens follow
    the target (chi-square over the second token given the first, p > 0.01, on 20k rows of one verify)."""
    from test_engine import _chi2

    from optimum_uag.engine.sampling import LogitsWarper

    vocab, rows, a, c1, c2, cp = 8, 20000, 1, 2, 3, 4
    # block: root, A(a) [head], c1, c2 under A, A'(a) [branch], c' under A'
    tree = _tree([0, 1, 1, 0, 4], 2)
    tree = Tree(parents=tree.parents.expand(rows, -1), depths=tree.depths.expand(rows, -1),
                ancestors=tree.ancestors.expand(rows, -1, -1), max_depth=2)
    nodes = torch.tensor([[a, c1, c2, a, cp]]).expand(rows, -1)
    root = torch.full((vocab,), 0.1 / (vocab - 1)).index_fill(0, torch.tensor([a]), 0.9)
    after_a = torch.tensor([0.12, 0.12, 0.05, 0.05, 0.3, 0.12, 0.12, 0.12])  # at A and at A': the same prefix
    table = torch.stack([root, after_a, after_a, after_a, after_a, after_a]).log()  # (N + 1, V) per block column

    class FixedLogits:  # the target's logits per block column (the verify's sampling is what is under test)
        def forward(self, tokens, start, logits_to_keep=0, hidden=False, tree=None):
            return table.expand(tokens.shape[0], -1, -1)

        def keep_path(self, start, columns, accepted=None):
            pass

    state = DecodingState.create(torch.tensor([[5, 6]]).expand(rows, -1), torch.zeros(rows, dtype=torch.long), 8, 0, 4)
    torch.manual_seed(99)
    verdict, _ = Verifier(FixedLogits(), LogitsWarper())(state, Proposal(tokens=nodes, tree=tree))
    first_a = verdict.accepted >= 1
    assert verdict.tokens[~first_a, 0].ne(a).all()
    second = verdict.tokens[first_a, 1].numpy()
    assert abs(first_a.float().mean().item() - 0.9) < 0.01
    assert _chi2(second, after_a.numpy(), second.size) > 0.01
