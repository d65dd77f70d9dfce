"""The datastore of the target's own answers (drafters/datastore.py, an A/B option measured not to pay on SmolLM2):
n-gram retrieval (the longest n-gram first, the continuation most matches share, documents kept apart), and the lookup
branch it feeds beside the head's tree: longer acceptances where it knows the continuation, the target's own output
always (greedy, batches, sampling)."""
import pytest
import torch

import optimum_uag.engine.drafters.combined as combined
from optimum_uag import assisted_generate
from optimum_uag.engine.config import DEFAULT_TREE
from optimum_uag.engine.drafters.datastore import Datastore

from test_engine import batch, reference
from test_feature_drafter import make_head
from test_tree import _two_token_oracle


def test_the_longest_ngram_decides_and_the_majority_continues():
    store = Datastore([[1, 2, 3, 4, 5, 6], [9, 2, 3, 4, 5, 7], [2, 3, 4, 5, 6, 8], [7, 3, 4, 9]], max_ngram=4)
    # [2, 3, 4] (n = 3) matches three documents: 5, then 6 (two of three), then 8 (the one still agreeing)
    assert store.continuation([0, 2, 3, 4], 5) == ([5, 6, 8], 3)
    # [3, 4] (n = 2) also matches the fourth document: 5 is still the majority
    assert store.continuation([8, 8, 3, 4], 2) == ([5, 6], 2)
    # a continuation stops at its document's end (no token of the next document)
    assert store.continuation([4, 5, 6], 4) == ([8], 3)
    # no n-gram of min_ngram (2) or more: nothing
    assert store.continuation([7, 7], 3) == ([], 0)
    assert store.continuation([4], 3) == ([], 0)
    assert store.continuation([2, 5, 6, 8], 2) == ([], 0)
    # a match at a document's very end has no continuation: the shorter n-gram that has one is taken
    ends = Datastore([[1, 2, 3], [5, 2, 3, 4]])
    assert ends.continuation([1, 2, 3], 2) == ([4], 2)


def test_propose_reads_each_rows_own_tokens_after_its_padding():
    store = Datastore([[1, 2, 3, 4, 5, 6], [0, 9, 7]], max_ngram=4)  # ([0, 9] matches only if padding is read)
    tokens = torch.tensor([[0, 0, 2, 3, 0, 0], [3, 1, 2, 0, 0, 0], [0, 0, 0, 9, 0, 0]])
    length, pad = torch.tensor([4, 3, 4]), torch.tensor([2, 0, 3])
    cand, valid, n = store.propose(tokens, length, pad, 3)
    assert cand[0].tolist() == [4, 5, 6] and valid[0].all() and n[0] == 2
    assert cand[1].tolist() == [3, 4, 5] and n[1] == 2  # [1, 2]
    assert not valid[2].any() and n[2] == 0  # one token of its own: the padding zeros never count


def test_a_large_vocabulary_packs_fewer_tokens_a_key():
    store = Datastore([[70000, 70001, 70002, 70003]], max_ngram=4)
    assert store.key_tokens == 3 and store.max_ngram == 3
    assert store.continuation([70000, 70001], 2) == ([70002, 70003], 2)


@pytest.mark.parametrize("policy", ["fallback", "longer"])
def test_a_datastore_that_knows_the_answer_lengthens_the_branch(embedded, prompts, monkeypatch, policy):
    """The datastore holds the target's own greedy answer to this request (another request's answer in a real
    datastore): its continuation is verified as the tree's lookup branch where the row's own n-gram lookup has none
    ("fallback") or a shorter one ("longer"), so rounds accept past the tree's depth; the output is the target's own.
    The head is an oracle for its first two tokens (it endorses every true branch)."""
    model, tok = embedded["target"]
    head = make_head(model, None)
    ids, mask = batch(tok, [prompts[1]])
    ref = reference(model, ids, mask, 32, tok)
    _two_token_oracle(monkeypatch, ref)
    monkeypatch.setattr(combined, "DATASTORE_POLICY", policy)
    answer = ref[0, ids.shape[1] - 4 :].tolist()
    runs = {}
    for name, store in {"none": None, "answer": Datastore([answer])}.items():
        head.datastore = store
        runs[name] = assisted_generate(model, head, ids, mask, max_new_tokens=32, draft_tree=True,
                                       draft_policy="fixed", max_matching_ngram_size=1 if policy == "fallback" else 2)
    for out in runs.values():
        assert torch.equal(out.sequences, ref)
    width = DEFAULT_TREE.nodes + 1
    assert any(n > width for _, n in runs["answer"].metrics.target_shapes)
    assert runs["answer"].metrics.target_calls < runs["none"].metrics.target_calls
    assert runs["answer"].metrics.tau > runs["none"].metrics.tau + 0.5


@pytest.mark.parametrize("draft_policy", ["fixed", "adaptive"])
def test_a_misleading_datastore_keeps_a_batch_exact(embedded, prompts, draft_policy, monkeypatch):
    """A datastore of wrong continuations (the target's answers with every fifth token shifted, and one reversed) on a
    left-padded batch with the real (untrained) head: its branches are proposed, and the output is still the
    target's own."""
    model, tok = embedded["target"]
    monkeypatch.setattr(combined, "DATASTORE_POLICY", "longer")
    head = make_head(model, None)
    ids, mask = batch(tok, [prompts[0], prompts[2][:30]])
    ref = reference(model, ids, mask, 24, tok)
    vocab = model.config.vocab_size
    true = [row[ids.shape[1] - 6 :] for row in ref.tolist()]
    # every fifth token shifted: the rows' recent n-grams match, their continuations go wrong within five tokens
    wrong = [[x if i % 5 else (x + 1) % vocab for i, x in enumerate(t)] for t in true]
    head.datastore = Datastore(wrong + [ref[1].tolist()[::-1]])
    used = []
    propose = combined.LookupThenDraft._from_datastore

    def counted(self, state, look, plain, start):
        out = propose(self, state, look, plain, start)
        used.append(out[0] is not look)  # some row's branch came from the datastore
        return out

    monkeypatch.setattr(combined.LookupThenDraft, "_from_datastore", counted)
    out = assisted_generate(model, head, ids, mask, max_new_tokens=24, draft_tree=True, draft_policy=draft_policy)
    assert torch.equal(out.sequences, ref)
    assert any(used)


def test_tree_sampling_with_a_datastore_branch_keeps_the_target_distribution(monkeypatch):
    """Sampling over the head's tree with the lookup branch taken from a datastore (deterministic continuations, no
    draft distribution, as prompt lookup's): the joint distribution of the first two new tokens is the target's own
    (chi-square, p > 0.01)."""
    from test_engine import _chi2, _joint_first_two, _sharp_llama

    from optimum_uag.engine.sampling import LogitsWarper

    vocab, n = 8, 6000
    model = _sharp_llama(vocab, 0, 4.0)
    head = make_head(model, 6, seed=3)
    gen = torch.Generator().manual_seed(7)
    head.datastore = Datastore([torch.randint(0, vocab, (24,), generator=gen).tolist() for _ in range(40)])
    monkeypatch.setattr(combined, "DATASTORE_POLICY", "longer")
    used = []
    propose = Datastore.propose

    def counted(self, *args):
        out = propose(self, *args)
        used.append(int(out[1][:, 0].sum()))
        return out

    monkeypatch.setattr(Datastore, "propose", counted)
    prompt = torch.tensor([[1, 2, 3, 1, 2]])
    expected = _joint_first_two(model, prompt, LogitsWarper(1.0, 0, 1.0))
    torch.manual_seed(4321)
    out = assisted_generate(model, head, prompt.repeat(n, 1), max_new_tokens=3, do_sample=True, eos_token_id=None,
                            tree_depth=3, tree_top_k=2, tree_nodes=6, draft_policy="fixed")
    assert used and max(used) > n // 2  # most rows had a datastore continuation
    samples = (out.sequences[:, 5] * vocab + out.sequences[:, 6]).numpy()
    assert _chi2(samples, expected, n) > 0.01
