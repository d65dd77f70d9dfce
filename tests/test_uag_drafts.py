"""UAG with GPT-2-, OPT- and BLOOM-style drafts on real tokenizers of different kinds: non-Latin text, emoji,
a BOS-only prompt, a prompt ending with EOS, a byte-level draft with a tiny vocabulary and few positions."""
from functools import lru_cache

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from optimum_uag import assisted_generate
from optimum_uag.testing.architectures import tiny_model

from helpers import _fast, byte_level_bpe, corpus, metaspace_unigram, sentencepiece_bpe, tiny_llama

WORLD = ["안녕하세요 세계 😀🎉 مرحبا بالعالم 日本語のテキスト 🚀✨ 中文字符 👍🏽 Ünïcödé\n" * 4]


def _byte_level(vocab_size: int, texts: list[str], special: str):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[special], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    return tok


@lru_cache(maxsize=None)
def multilingual_bpe():
    """Byte-level BPE whose merges cover Korean, Arabic, CJK and emoji (one token per character or more)."""
    tok = _byte_level(900, corpus() + WORLD * 20, "<|endoftext|>")
    return _fast(tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>", pad_token="<|endoftext|>")


@lru_cache(maxsize=None)
def bytes_only():
    """A byte-level tokenizer with no merges: 256 bytes + one special token (an emoji costs 4 tokens)."""
    return _fast(_byte_level(257, ["a"], "<eot>"), eos_token="<eot>", pad_token="<eot>")


DRAFT_TOKENIZERS = {"sentencepiece": sentencepiece_bpe, "unigram": metaspace_unigram, "bytes": bytes_only}


def _draft(arch: str, tok, seed: int = 1, **overrides):
    return tiny_model(arch, len(tok), seed, dtype=torch.float32, **overrides)


def _target(tok, eos: bool = True):
    model = tiny_llama(len(tok), 0, eos=tok.eos_token_id if eos else None)
    model.generation_config.pad_token_id = tok.pad_token_id
    return model


def _check(target, draft, tok, dtok, ids, mask, n=24, k=4):
    ref = target.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=n, pad_token_id=tok.pad_token_id)
    out = assisted_generate(target, draft, ids, mask, tokenizer=tok, assistant_tokenizer=dtok, max_new_tokens=n,
                            num_assistant_tokens=k)
    assert torch.equal(out.sequences, ref)
    return out


@pytest.mark.parametrize("arch", ["gpt2", "opt", "bloom"])
@pytest.mark.parametrize("dname", list(DRAFT_TOKENIZERS))
def test_uag_draft_architectures_on_awkward_tokenizers(arch, dname):
    tok, dtok = multilingual_bpe(), DRAFT_TOKENIZERS[dname]()
    target, draft = _target(tok), _draft(arch, dtok)
    texts = ["안녕하세요 😀", "def f(x):\n    return 'naïve' # 日本語", "مرحبا 🚀"]
    for batch in (texts[:1], texts):
        enc = tok(batch, return_tensors="pt", padding=True, return_token_type_ids=False)
        _check(target, draft, tok, dtok, enc["input_ids"], enc["attention_mask"])


@pytest.mark.parametrize("arch", ["gpt2", "opt", "bloom"])
def test_bos_only_prompt(arch):
    """The target prompt is only BOS: its text is empty, so the draft starts from its own special token."""
    tok, dtok = sentencepiece_bpe(), byte_level_bpe()
    target, draft = _target(tok), _draft(arch, dtok)
    ids = torch.tensor([[tok.bos_token_id]])
    _check(target, draft, tok, dtok, ids, torch.ones_like(ids))
    enc = tok(["", "x = 1"], return_tensors="pt", padding=True, return_token_type_ids=False)  # and in a batch
    _check(target, draft, tok, dtok, enc["input_ids"], enc["attention_mask"])


@pytest.mark.parametrize("arch", ["gpt2", "opt", "bloom"])
def test_prompt_ending_with_eos_still_generates(arch):
    tok, dtok = byte_level_bpe(), sentencepiece_bpe()
    target, draft = _target(tok), _draft(arch, dtok)
    ids = torch.tensor([tok("x = 1\n")["input_ids"] + [tok.eos_token_id]])
    out = _check(target, draft, tok, dtok, ids, torch.ones_like(ids))
    assert out.sequences.shape[1] > ids.shape[1]  # transformers' own UAG returns no new tokens here


def _emoji_cjk_target(tok):
    """A random Llama that only emits tokens spelling emoji / CJK / Hangul characters (a logit bias in the model)."""
    from helpers import CleanLlama
    from transformers import LlamaConfig

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                      pad_token_id=tok.pad_token_id, eos_token_id=None)
    model = CleanLlama(cfg).eval()
    bias = torch.full((len(tok),), -1e4)
    for idx in range(len(tok)):
        text = tok.decode([idx])
        if text and all(ord(c) > 0x2E80 for c in text) and "\ufffd" not in text:
            bias[idx] = 0.0
    assert (bias == 0).sum() >= 5
    model.register_buffer("logit_bias", bias, persistent=False)
    return model


@pytest.mark.slow
def test_tiny_byte_level_draft_generates_256_emoji_and_cjk_tokens(monkeypatch):
    """Each target token costs the byte-level draft 3-8 tokens, and the draft has only 96 positions: the draft's
    buffer must grow / its window slide, never refuse, and the output must stay the target's own."""
    tok, dtok = multilingual_bpe(), bytes_only()
    target = _emoji_cjk_target(tok)
    draft = _draft("gpt2", dtok, n_positions=96)
    from optimum_uag.engine.drafters.universal import UniversalDrafter

    resets = []
    original = UniversalDrafter._reset
    monkeypatch.setattr(UniversalDrafter, "_reset", lambda self, *a: resets.append(1) or original(self, *a))
    enc = tok(["😀 안녕", "日本語のテキスト 🚀✨"], return_tensors="pt", padding=True, return_token_type_ids=False)
    out = _check(target, draft, tok, dtok, enc["input_ids"], enc["attention_mask"], n=256, k=5)
    text = tok.decode(out.sequences[0, enc["input_ids"].shape[1]:])
    assert len(text) >= 200 and all(ord(c) > 0x2E80 for c in text)
    assert len(resets) > 2  # the draft's 96 positions were passed several times: its window slid
