"""The engine with a same-tokenizer draft (and prompt lookup): exactness, sampling, shapes, metrics, bad input."""
import numpy as np
import pytest
import torch
from scipy.stats import chisquare
from transformers.generation.utils import GenerationMixin

import optimum_uag
from optimum_uag import assisted_generate
from optimum_uag.engine.sampling import LogitsWarper

from helpers import tiny_llama


def batch(tok, texts):
    enc = tok(texts, return_tensors="pt", padding=True, return_token_type_ids=False)
    return enc["input_ids"], enc["attention_mask"]


@pytest.fixture(scope="module")
def pair(embedded):
    (target, tok), (draft, _) = embedded["target"], embedded["assistant_same_tokenizer"]
    return target, draft, tok


def reference(model, ids, mask, n, tok):
    return model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=n, pad_token_id=tok.pad_token_id)


@pytest.mark.parametrize("k", [1, 3, 8])
@pytest.mark.parametrize("schedule", ["constant", "heuristic", "confidence"])
def test_greedy_matches_target_batch1_and_4(pair, prompts, k, schedule):
    target, draft, tok = pair
    for texts in ([prompts[1]], [prompts[2], prompts[3][:40], prompts[4], prompts[5][:90]]):
        ids, mask = batch(tok, texts)
        ref = reference(target, ids, mask, 32, tok)
        out = assisted_generate(target, draft, ids, mask, max_new_tokens=32, num_assistant_tokens=k,
                                num_assistant_tokens_schedule=schedule)
        assert torch.equal(out.sequences, ref)


def test_same_tokenizer_draft_is_accepted(pair, prompts):
    target, draft, tok = pair
    ids, mask = batch(tok, prompts[:4])
    out = assisted_generate(target, draft, ids, mask, max_new_tokens=48, num_assistant_tokens=5)
    assert out.metrics.acceptance_rate > 0.3 and out.metrics.tau > 2.0, out.metrics.as_dict()


def test_prompt_lookup_matches_target(pair, prompts):
    target, _, tok = pair
    ids, mask = batch(tok, prompts[6:10])
    ref = reference(target, ids, mask, 40, tok)
    out = assisted_generate(target, None, ids, mask, max_new_tokens=40, prompt_lookup_num_tokens=6)
    assert torch.equal(out.sequences, ref)
    assert out.metrics.draft_shapes == []


def test_shapes_do_not_grow_with_max_new_tokens(pair, prompts):
    target, draft, tok = pair
    ids, mask = batch(tok, prompts[:2])
    short = assisted_generate(target, draft, ids, mask, max_new_tokens=16, num_assistant_tokens=4, eos_token_id=None)
    long = assisted_generate(target, draft, ids, mask, max_new_tokens=64, num_assistant_tokens=4, eos_token_id=None)
    assert short.metrics.target_shapes == long.metrics.target_shapes
    assert short.metrics.draft_shapes == long.metrics.draft_shapes
    assert len(long.metrics.target_shapes) == 2  # prefill+verify, verify
    assert len(long.metrics.draft_shapes) == 3  # prefill, re-read of the last two tokens, one-token decode


def test_metrics_are_consistent(pair, prompts):
    target, draft, tok = pair
    ids, mask = batch(tok, prompts[:3])
    out = assisted_generate(target, draft, ids, mask, max_new_tokens=30, num_assistant_tokens=4, eos_token_id=None)
    m = out.metrics
    assert m.accepted_tokens + m.target_tokens == m.generated_tokens == 3 * 30
    assert out.sequences.shape == (3, ids.shape[1] + 30)
    assert 0 <= m.accepted_tokens <= m.draft_tokens
    assert m.tau == pytest.approx(m.generated_tokens / m.row_target_calls)
    assert m.draft_seconds > 0 and m.verify_seconds > 0
    out.sequences[:, :1].add_(0)  # an ordinary tensor (not an inference-mode one): in-place ops work


def test_rows_stop_on_their_own_eos(pair, prompts):
    target, draft, tok = pair
    ids, mask = batch(tok, prompts[10:14])
    ref = target.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=40, eos_token_id=[25, 198],
                          pad_token_id=tok.pad_token_id)
    out = assisted_generate(target, draft, ids, mask, max_new_tokens=40, eos_token_id=[25, 198])
    assert torch.equal(out.sequences, ref)


def test_enable_routes_generate_and_disable_restores(pair, prompts):
    target, draft, tok = pair
    original = GenerationMixin.generate
    ids, mask = batch(tok, prompts[:2])
    ref = reference(target, ids, mask, 24, tok)
    optimum_uag.enable()
    optimum_uag.enable()  # idempotent
    try:
        assert GenerationMixin.generate is not original
        out = target.generate(input_ids=ids, attention_mask=mask, assistant_model=draft, max_new_tokens=24,
                              do_sample=False, pad_token_id=tok.pad_token_id)
        assert torch.equal(out, ref)  # batch 2: transformers itself refuses this
        assert optimum_uag.last_metrics().target_calls > 0
        plain = target.generate(ids, attention_mask=mask, max_new_tokens=8, do_sample=False, pad_token_id=tok.pad_token_id)
        assert torch.equal(plain, ref[:, : ids.shape[1] + 8])
    finally:
        optimum_uag.disable()
        optimum_uag.disable()
    assert GenerationMixin.generate is original


def test_streamer_gets_every_token(pair, prompts):
    target, draft, tok = pair

    class Collect:
        def __init__(self):
            self.chunks, self.ended = [], False

        def put(self, x):
            self.chunks.append(x.reshape(-1).tolist())

        def end(self):
            self.ended = True

    ids, mask = batch(tok, prompts[:1])
    streamer = Collect()
    out = assisted_generate(target, draft, ids, mask, max_new_tokens=20, streamer=streamer, eos_token_id=None)
    assert streamer.ended and streamer.chunks[0] == ids[0].tolist()
    assert sum(streamer.chunks[1:], []) == out.sequences[0, ids.shape[1]:].tolist()


# --------------------------------------------------------------------------------------------- sampling
def _sharp_llama(vocab, seed, scale):
    model = tiny_llama(vocab, seed, layers=1, hidden=16)
    with torch.no_grad():
        model.lm_head.weight.mul_(scale)
    return model


def _joint_first_two(target, prompt, warper):
    """Exact target-only distribution of the first two sampled tokens."""
    with torch.no_grad():
        p1 = warper.probs(target(prompt).logits[:, -1])[0]
        ext = torch.cat([prompt.repeat(p1.shape[0], 1), torch.arange(p1.shape[0])[:, None]], 1)
        p2 = warper.probs(target(ext).logits[:, -1])
    return (p1[:, None] * p2).reshape(-1).numpy()


def _chi2(samples, expected, n):
    counts = np.bincount(samples, minlength=expected.size).astype(np.float64)
    expected = expected.astype(np.float64)
    assert counts[expected < 1e-9].sum() == 0, "samples in cells the target never produces"
    exp = expected / expected.sum() * n
    keep = exp >= 5
    obs = np.append(counts[keep], counts[~keep].sum())
    exp = np.append(exp[keep], exp[~keep].sum())
    if exp[-1] < 5:  # merge a small remainder into the last kept cell
        obs[-2] += obs[-1]
        exp[-2] += exp[-1]
        obs, exp = obs[:-1], exp[:-1]
    return chisquare(obs, exp * obs.sum() / exp.sum()).pvalue


@pytest.mark.parametrize("draft_scale,kwargs", [
    (3.0, dict()),
    (30.0, dict()),  # a deliberately bad, over-confident draft
    (3.0, dict(temperature=0.7, top_k=5, top_p=0.9)),
])
def test_sampling_matches_target_distribution(draft_scale, kwargs):
    vocab, n = 8, 6000
    target = _sharp_llama(vocab, 0, 4.0)
    draft = _sharp_llama(vocab, 1, draft_scale)
    prompt = torch.tensor([[1, 2, 3]])
    warper = LogitsWarper(kwargs.get("temperature", 1.0), kwargs.get("top_k", 0), kwargs.get("top_p", 1.0))
    expected = _joint_first_two(target, prompt, warper)
    torch.manual_seed(1234)
    out = assisted_generate(target, draft, prompt.repeat(n, 1), max_new_tokens=2, do_sample=True,
                            num_assistant_tokens=3, eos_token_id=None, top_k=kwargs.get("top_k", 0), **{
                                k: v for k, v in kwargs.items() if k != "top_k"})
    samples = (out.sequences[:, 3] * vocab + out.sequences[:, 4]).numpy()
    assert _chi2(samples, expected, n) > 0.01
    assert out.metrics.accepted_tokens > 0


def test_sampling_detects_a_wrong_distribution():
    """The statistical test has power: samples from the draft alone are rejected."""
    vocab, n = 8, 6000
    target, draft = _sharp_llama(vocab, 0, 4.0), _sharp_llama(vocab, 1, 3.0)
    prompt = torch.tensor([[1, 2, 3]])
    expected = _joint_first_two(target, prompt, LogitsWarper())
    torch.manual_seed(1234)
    wrong = draft.generate(prompt.repeat(n, 1), attention_mask=torch.ones(n, 3, dtype=torch.long), do_sample=True,
                           max_new_tokens=2, top_k=0, pad_token_id=0)
    samples = (wrong[:, 3] * vocab + wrong[:, 4]).numpy()
    assert _chi2(samples, expected, n) < 1e-6


def test_prompt_lookup_sampling_matches_target_distribution():
    vocab, n = 8, 6000
    target = _sharp_llama(vocab, 0, 4.0)
    prompt = torch.tensor([[1, 2, 3, 1, 2]])
    expected = _joint_first_two(target, prompt, LogitsWarper())
    torch.manual_seed(99)
    out = assisted_generate(target, None, prompt.repeat(n, 1), max_new_tokens=2, do_sample=True, top_k=0,
                            prompt_lookup_num_tokens=3, eos_token_id=None)
    samples = (out.sequences[:, 5] * vocab + out.sequences[:, 6]).numpy()
    assert _chi2(samples, expected, n) > 0.01


# -------------------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("kwargs,match", [
    (dict(num_assistant_tokens=0), "num_assistant_tokens must be an integer >= 1"),
    (dict(max_new_tokens=0), "max_new_tokens must be an integer >= 1"),
    (dict(max_new_tokens=5000), "max_position_embeddings"),
    (dict(num_beams=2), "beam search is not supported"),
    (dict(num_return_sequences=2), "num_return_sequences"),
    (dict(penalty_alpha=0.5), "contrastive search"),
    (dict(num_assistant_tokens_schedule="fast"), "num_assistant_tokens_schedule must be one of"),
    (dict(do_sample=True, temperature=0.0), "temperature must be > 0"),
    (dict(frobnicate=1), "unexpected arguments"),
])
def test_bad_generation_arguments(pair, kwargs, match):
    target, draft, tok = pair
    ids = tok("def f():", return_tensors="pt").input_ids
    kwargs = {"max_new_tokens": 8, **kwargs}
    with pytest.raises((ValueError, TypeError), match=match):
        assisted_generate(target, draft, ids, **kwargs)


def test_bad_inputs(pair, embedded):
    target, draft, tok = pair
    ids = tok("def f():", return_tensors="pt").input_ids
    with pytest.raises(ValueError, match="non-empty"):
        assisted_generate(target, draft, torch.zeros(1, 0, dtype=torch.long), max_new_tokens=4)
    padded = torch.tensor([[tok.pad_token_id, 5, 6], [7, 8, 9]])
    with pytest.raises(ValueError, match="no attention_mask"):
        assisted_generate(target, draft, padded, max_new_tokens=4)
    with pytest.raises(ValueError, match="left-padded"):
        assisted_generate(target, draft, padded, torch.tensor([[1, 1, 0], [1, 1, 1]]), max_new_tokens=4)
    cross = embedded["assistant"][0]
    with pytest.raises(ValueError, match="pass tokenizer= and assistant_tokenizer="):
        assisted_generate(target, cross, ids, max_new_tokens=4)
    with pytest.raises(ValueError, match="assistant_tokenizer is missing"):
        assisted_generate(target, cross, ids, max_new_tokens=4, tokenizer=tok)
    with pytest.raises(ValueError, match="prompt_lookup_num_tokens"):
        assisted_generate(target, None, ids, max_new_tokens=4)
    with pytest.raises(ValueError, match="move it with"):
        assisted_generate(target, tiny_llama(target.config.vocab_size, 4).to("meta"), ids, max_new_tokens=4)


@pytest.mark.parametrize("kind", ["float", "bool", "negative", "past_target_vocab", "past_draft_vocab"])
def test_bad_token_ids_get_a_value_error(pair, kind):
    """Each kind once ended in an IndexError from torch's embedding (or was accepted silently): now a ValueError
    naming the value and the vocabulary size."""
    target, draft, tok = pair
    ids = tok("def f():", return_tensors="pt").input_ids
    vocab = target.get_input_embeddings().num_embeddings
    if kind == "float":
        ids, match = ids.float(), "integer token ids"
    elif kind == "bool":
        ids, match = ids.bool(), "integer token ids"
    elif kind == "negative":
        ids, match = torch.cat([ids, torch.tensor([[-3]])], 1), rf"token id -3, outside the model's vocabulary \[0, {vocab}\)"
    elif kind == "past_target_vocab":
        ids, match = torch.cat([ids, torch.tensor([[vocab + 7]])], 1), rf"token id {vocab + 7}, outside the model's"
    else:  # a same-tokenizer draft whose table is smaller than the target's: the prompt's ids must fit it too
        small = tiny_llama(vocab - 10, 5)
        ids, match = torch.cat([ids, torch.tensor([[vocab - 3]])], 1), rf"outside the assistant model's vocabulary \[0, {vocab - 10}\)"
        draft = small
    pair_kwargs = dict(tokenizer=tok, assistant_tokenizer=tok) if kind == "past_draft_vocab" else {}
    with pytest.raises(ValueError, match=match):
        assisted_generate(target, draft, ids, max_new_tokens=4, **pair_kwargs)
    optimum_uag.enable()
    with pytest.raises(ValueError, match=match):  # transformers' entry point too
        target.generate(ids, assistant_model=draft, max_new_tokens=4, do_sample=False, **pair_kwargs)


def test_nan_logits_raise(pair):
    target, _, tok = pair
    broken = tiny_llama(target.config.vocab_size, 3)
    with torch.no_grad():
        broken.lm_head.weight.fill_(float("nan"))
    ids = tok("def f():", return_tensors="pt").input_ids
    with pytest.raises(FloatingPointError, match="NaN/inf"):
        assisted_generate(broken, None, ids, max_new_tokens=4, prompt_lookup_num_tokens=2)


def test_heuristic_schedule_is_capped(pair, prompts):
    """K grows by 2 while all drafts are accepted, but never past max_assistant_tokens: shapes stay bounded."""
    target, draft, tok = pair
    ids, mask = batch(tok, prompts[:1])
    ref = reference(target, ids, mask, 48, tok)
    out = assisted_generate(target, draft, ids, mask, max_new_tokens=48, num_assistant_tokens=2,
                            num_assistant_tokens_schedule="heuristic", max_assistant_tokens=6)
    assert torch.equal(out.sequences, ref)
    widths = [w for _, w in out.metrics.target_shapes if w != ids.shape[1] + 2]
    assert widths and max(widths) <= 7


def test_gaudi_enable_without_gaudi_names_the_fix():
    import optimum_uag.gaudi

    with pytest.raises(ImportError, match="HPUEmulator"):
        optimum_uag.gaudi.enable()


def test_metrics_merge_adds_counters_and_unites_shapes():
    from optimum_uag.engine.metrics import Metrics

    a, b = Metrics(), Metrics()
    a.observe(drafted=4, accepted=3, generated=4, active=1, draft_s=0.1, verify_s=0.2, other_s=0.0)
    b.observe(drafted=2, accepted=0, generated=1, active=1, draft_s=0.1, verify_s=0.2, other_s=0.0)
    a.target_shapes, b.target_shapes = [(1, 5)], [(1, 5), (1, 9)]
    total = a.merge(b)
    assert (total.target_calls, total.draft_tokens, total.accepted_tokens, total.generated_tokens) == (2, 6, 3, 5)
    assert total.tau == 2.5 and total.acceptance_rate == 0.5 and total.target_shapes == [(1, 5), (1, 9)]
