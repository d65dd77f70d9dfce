"""Every generation option transformers' assisted generation accepts, with the same meaning: greedy ids equal to
the target's own generate() with the same option (same-tokenizer and cross-tokenizer drafts, batch 1 and 2),
scores/logits equal to transformers', sampling with processors tested statistically."""
import pytest
import torch
from transformers import LogitsProcessor, LogitsProcessorList, RepetitionPenaltyLogitsProcessor, TopPLogitsWarper

import optimum_uag
from optimum_uag import assisted_generate

from helpers import byte_level_bpe, pad_batch, sentencepiece_bpe, tiny_llama, tiny_neox
from test_engine import _chi2

TEXTS = ["def f(x):\n    return x", "import os"]
N = 20


class BanEvenLengths(LogitsProcessor):
    """A custom processor that depends on the prefix length: bans token 7 after an even number of tokens."""

    def __call__(self, input_ids, scores):
        if input_ids.shape[1] % 2 == 0:
            scores[:, 7] = -float("inf")
        return scores


OPTIONS = {
    "repetition_penalty": dict(repetition_penalty=1.4),
    "no_repeat_ngram_size": dict(no_repeat_ngram_size=2),
    "min_new_tokens": dict(min_new_tokens=N),
    "bad_words_ids": dict(bad_words_ids=[[5], [7, 8]]),
    "suppress_tokens": dict(suppress_tokens=[3, 4, 5, 6]),
    "sequence_bias": dict(sequence_bias={(6,): 6.0}),
    "logits_processor": dict(logits_processor=LogitsProcessorList([BanEvenLengths()])),
    "forced_eos_token_id": dict(forced_eos_token_id=0),
    "combined": dict(repetition_penalty=1.2, no_repeat_ngram_size=3, min_new_tokens=5),
}


@pytest.fixture(scope="module")
def models():
    tok, dtok = byte_level_bpe(), sentencepiece_bpe()
    target = tiny_llama(len(tok), 0, eos=tok.eos_token_id).double()
    same = tiny_llama(len(tok), 1).double()
    cross = tiny_neox(len(dtok), 2).double()
    return target, same, cross, tok, dtok


@pytest.fixture(scope="module")
def head(models):
    """A feature head (EAGLE) for the target, away from its near-identity start."""
    from optimum_uag.testing.heads import untrained_head

    return untrained_head(models[0])


@pytest.mark.parametrize("name", list(OPTIONS))
def test_greedy_option_matches_target(models, head, name):
    """Same-tokenizer and UAG drafts at K=4; a feature head with its defaults (a processor makes it draft a chain)
    and with a tree asked for; prompt lookup alone."""
    target, same, cross, tok, dtok = models
    kwargs = OPTIONS[name]
    drafts = {"same": (same, dict(num_assistant_tokens=4)),
              "cross": (cross, dict(num_assistant_tokens=4, tokenizer=tok, assistant_tokenizer=dtok)),
              "head": (head, {}), "head tree": (head, dict(draft_tree=True, draft_policy="fixed")),
              "lookup": (None, dict(prompt_lookup_num_tokens=3))}
    for texts in (TEXTS[:1], TEXTS):
        ids, mask = pad_batch(tok, texts)
        ref = target.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=N,
                              pad_token_id=tok.pad_token_id, **kwargs)
        for label, (draft, extra) in drafts.items():
            out = assisted_generate(target, draft, ids, mask, max_new_tokens=N, **extra, **kwargs)
            assert torch.equal(out.sequences, ref), (name, len(texts), label)


def test_processors_steer_the_draft_too(models):
    """A draft identical to the target, processed with the same repetition_penalty / no_repeat_ngram_size, proposes
    exactly the target's tokens: every draft token is accepted (unprocessed, it would propose repeats)."""
    import copy

    target, _, _, tok, _ = models
    twin = copy.deepcopy(target)
    ids, mask = pad_batch(tok, TEXTS)
    kwargs = dict(repetition_penalty=1.6, no_repeat_ngram_size=2)
    ref = target.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=N, pad_token_id=tok.pad_token_id,
                          **kwargs)
    out = assisted_generate(target, twin, ids, mask, max_new_tokens=N, num_assistant_tokens=4, **kwargs)
    assert torch.equal(out.sequences, ref)
    assert out.metrics.acceptance_rate == 1.0, out.metrics.as_dict()


def test_stop_strings_match_target(models):
    target, same, cross, tok, dtok = models
    ids, mask = pad_batch(tok, TEXTS[:1])
    free = target.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=N, pad_token_id=tok.pad_token_id)
    text = tok.decode(free[0, ids.shape[1]:])
    stop = text[len(text) // 2 : len(text) // 2 + 2]
    assert stop.strip()
    ref = target.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=N, pad_token_id=tok.pad_token_id,
                          stop_strings=stop, tokenizer=tok)
    assert ref.shape[1] < free.shape[1]
    for draft, extra in ((same, {}), (cross, dict(assistant_tokenizer=dtok))):
        out = assisted_generate(target, draft, ids, mask, max_new_tokens=N, stop_strings=stop, tokenizer=tok, **extra)
        assert torch.equal(out.sequences, ref)
    with pytest.raises(ValueError, match="stop_strings needs the target's tokenizer"):
        assisted_generate(target, same, ids, mask, max_new_tokens=N, stop_strings=stop)


@pytest.mark.parametrize("kwargs", [dict(), dict(repetition_penalty=1.3), dict(no_repeat_ngram_size=2, min_new_tokens=12)])
def test_scores_and_logits_equal_transformers(models, kwargs):
    target, same, cross, tok, _ = models
    ids, _ = pad_batch(tok, TEXTS[:1])
    ref = target.generate(ids, do_sample=False, max_new_tokens=12, output_scores=True, output_logits=True,
                          return_dict_in_generate=True, pad_token_id=tok.pad_token_id, **kwargs)
    out = assisted_generate(target, same, ids, max_new_tokens=12, output_scores=True, output_logits=True, **kwargs)
    assert torch.equal(out.sequences, ref.sequences)
    assert len(out.scores) == len(ref.scores) == len(out.logits) == 12
    for a, b in zip(out.scores, ref.scores):
        assert torch.allclose(a, b, atol=1e-5)
    for a, b in zip(out.logits, ref.logits):
        assert torch.allclose(a, b, atol=1e-5)


def test_generate_route_returns_transformers_fields(models):
    target, same, _, tok, _ = models
    ids, mask = pad_batch(tok, TEXTS)
    ref = target.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=8, pad_token_id=tok.pad_token_id,
                          logits_processor=LogitsProcessorList([BanEvenLengths()]))
    optimum_uag.enable()
    try:
        out = target.generate(ids, attention_mask=mask, assistant_model=same, do_sample=False, max_new_tokens=8,
                              pad_token_id=tok.pad_token_id, logits_processor=LogitsProcessorList([BanEvenLengths()]),
                              output_scores=True, return_dict_in_generate=True)
    finally:
        optimum_uag.disable()
    assert torch.equal(out.sequences, ref) and len(out.scores) == 8 and out.scores[0].shape == (2, len(tok))


def test_num_return_sequences_are_rows(models):
    target, same, _, tok, _ = models
    ids, mask = pad_batch(tok, TEXTS)
    torch.manual_seed(3)
    out = assisted_generate(target, same, ids, mask, max_new_tokens=6, do_sample=True, num_return_sequences=3)
    assert out.sequences.shape[0] == 6
    assert torch.equal(out.sequences[:3, : ids.shape[1]], ids[:1].expand(3, -1))
    with pytest.raises(ValueError, match="num_return_sequences"):
        assisted_generate(target, same, ids, mask, max_new_tokens=6, num_return_sequences=3)


@pytest.mark.parametrize("kwargs,match", [(dict(num_beams=2), "num_beams=2.*beam search"),
                                          (dict(penalty_alpha=0.6, top_k=4), "penalty_alpha.*contrastive search")])
def test_beam_and_contrastive_search_stay_refused(models, kwargs, match):
    target, same, _, tok, _ = models
    ids, _ = pad_batch(tok, TEXTS[:1])
    with pytest.raises(ValueError, match=match):
        assisted_generate(target, same, ids, max_new_tokens=4, **kwargs)


def _sharp_llama(vocab, seed, scale):
    model = tiny_llama(vocab, seed, layers=1, hidden=16)
    with torch.no_grad():
        model.lm_head.weight.mul_(scale)
    return model


def test_sampling_with_repetition_penalty_and_top_p_matches_target():
    vocab, n = 8, 6000
    target, draft = _sharp_llama(vocab, 0, 4.0), _sharp_llama(vocab, 1, 3.0)
    prompt = torch.tensor([[1, 2, 3]])
    procs = LogitsProcessorList([RepetitionPenaltyLogitsProcessor(3.0), TopPLogitsWarper(0.9)])
    with torch.no_grad():  # exact target-only distribution of the first two tokens, with the processors
        p1 = torch.softmax(procs(prompt, target(prompt).logits[:, -1].float()), -1)[0]
        ext = torch.cat([prompt.repeat(vocab, 1), torch.arange(vocab)[:, None]], 1)
        p2 = torch.softmax(procs(ext, target(ext).logits[:, -1].float()), -1)
    expected = (p1[:, None] * p2).reshape(-1).numpy()
    torch.manual_seed(11)
    out = assisted_generate(target, draft, prompt.repeat(n, 1), max_new_tokens=2, do_sample=True, top_k=0,
                            top_p=0.9, repetition_penalty=3.0, num_assistant_tokens=3, eos_token_id=None)
    samples = (out.sequences[:, 3] * vocab + out.sequences[:, 4]).numpy()
    assert _chi2(samples, expected, n) > 0.01
    assert out.metrics.accepted_tokens > 0
    # power: ignoring the penalty (the plain target distribution) is detected
    with torch.no_grad():
        q1 = torch.softmax(TopPLogitsWarper(0.9)(None, target(prompt).logits[:, -1].float()), -1)[0]
        q2 = torch.softmax(TopPLogitsWarper(0.9)(None, target(ext).logits[:, -1].float()), -1)
    plain = (q1[:, None] * q2).reshape(-1).numpy()
    try:
        assert _chi2(samples, plain, n) < 1e-4
    except AssertionError as err:  # samples where the plain distribution has none: rejected as well
        assert "never produces" in str(err)


def test_max_length_counts_the_prompt_as_in_transformers(models, head):
    """max_length (prompt + new tokens) without max_new_tokens, from the call or a generation_config, and neither
    (transformers' default max_length 20, which its generate() counts after the prompt): the same ids as the
    target's own generate(); a max_length that leaves no room is refused by name."""
    from transformers import GenerationConfig

    target, same, _, tok, _ = models
    ids, mask = pad_batch(tok, TEXTS)
    length = ids.shape[1] + 9
    ref = target.generate(ids, attention_mask=mask, do_sample=False, max_length=length, pad_token_id=tok.pad_token_id)
    for draft, extra in ((same, dict(num_assistant_tokens=3)), (head, {})):
        out = assisted_generate(target, draft, ids, mask, max_length=length, **extra)
        assert torch.equal(out.sequences, ref)
        out = assisted_generate(target, draft, ids, mask, generation_config=GenerationConfig(max_length=length),
                                **extra)
        assert torch.equal(out.sequences, ref)
    short = ids[:1, -5:]
    out = assisted_generate(target, head, short)  # (transformers: max_length 20 counted after the prompt)
    assert torch.equal(out.sequences, target.generate(short, attention_mask=torch.ones_like(short), do_sample=False,
                                                      pad_token_id=tok.pad_token_id))
    with pytest.raises(ValueError, match="max_length=5 leaves no room"):
        assisted_generate(target, head, short, max_length=5)
    # a generation_config that sets max_length=20 itself: what transformers' generate() makes of it on this version
    given = GenerationConfig(max_length=20, pad_token_id=tok.pad_token_id)
    ref = target.generate(short, attention_mask=torch.ones_like(short), do_sample=False, generation_config=given)
    assert torch.equal(assisted_generate(target, head, short, generation_config=given).sequences, ref)
