"""Test helpers: real tokenizers with awkward properties (built with `tokenizers`), tiny random models."""
from __future__ import annotations

import inspect
import json
import textwrap
from functools import lru_cache

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

from transformers import GPTNeoXConfig, GPTNeoXForCausalLM, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast


def corpus() -> list[str]:
    """A small code + text corpus: sources of a few stdlib modules, plus non-ASCII text."""
    import argparse
    import json as json_mod
    import textwrap as tw

    texts = [inspect.getsource(m) for m in (argparse, json_mod.decoder, tw)]
    texts += ["café déjà vu naïve — ünïcode ✓ 日本語のテキスト\n" * 3, "# -*- coding: utf-8 -*-\nprint('héllo')\n"]
    return texts


def _fast(tok: Tokenizer, **special) -> PreTrainedTokenizerFast:
    out = PreTrainedTokenizerFast(tokenizer_object=tok, clean_up_tokenization_spaces=False, **special)
    out.padding_side = "left"
    return out


@lru_cache(maxsize=None)
def byte_level_bpe(vocab_size: int = 600, extra_specials: tuple = ()) -> PreTrainedTokenizerFast:
    """GPT-2 style: 'Ġ' space marker, bytes as symbols, no UNK."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>", *extra_specials],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus(), trainer)
    return _fast(tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                 additional_special_tokens=list(extra_specials))


@lru_cache(maxsize=None)
def sentencepiece_bpe(vocab_size: int = 700, byte_fallback: bool = True, limit_alphabet: int = 60) -> PreTrainedTokenizerFast:
    """Llama style (the embedded assistant's recipe): prepend '▁', spaces -> '▁', <0xNN> byte fallback, BOS <s>;
    newlines and characters outside the small alphabet (é, ✓, 日) become byte tokens."""
    from train_embedded_models import llama_style_bpe

    lines = [line for t in corpus() for line in t.split("\n") if line.strip()]
    return llama_style_bpe(lines, vocab_size, limit_alphabet=limit_alphabet, byte_fallback=byte_fallback)


@lru_cache(maxsize=None)
def metaspace_unigram(vocab_size: int = 400) -> PreTrainedTokenizerFast:
    """Unigram with a Metaspace pre-tokenizer (T5/ALBERT style): words split at spaces, '▁' prepended."""
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=["<pad>", "</s>", "<unk>"],
                                      unk_token="<unk>", show_progress=False)
    tok.train_from_iterator(corpus(), trainer)
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", tok.token_to_id("</s>"))])
    return _fast(tok, eos_token="</s>", unk_token="<unk>", pad_token="<pad>")


@lru_cache(maxsize=None)
def bert_wordpiece(vocab_size: int = 500) -> PreTrainedTokenizerFast:
    """BERT style: lowercased, accents stripped, '##' continuations, [UNK] for what it cannot spell, [CLS] ... [SEP]
    around every encoding: its text does not round-trip (the target's text differs from what the draft reads)."""
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]"],
                                        show_progress=False)
    tok.train_from_iterator(corpus(), trainer)
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    return _fast(tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]", bos_token="[CLS]",
                 eos_token="[SEP]")


@lru_cache(maxsize=None)
def chat_byte_level() -> PreTrainedTokenizerFast:
    """Byte-level BPE with chat-template special tokens."""
    tok = byte_level_bpe(700, ("<|im_start|>", "<|im_end|>"))
    tok.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    return tok


def tiny_llama(vocab_size: int, seed: int, layers: int = 2, hidden: int = 32, eos: int | None = None) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                      pad_token_id=0, eos_token_id=eos, bos_token_id=None)
    return LlamaForCausalLM(cfg).eval()


class CleanLlama(LlamaForCausalLM):
    """A random Llama restricted (by a logit bias) to tokens that are whole UTF-8 text: its greedy output is
    readable, which an oracle draft needs. The bias is part of the model, so every decoding path sees it."""

    def forward(self, *args, **kwargs):
        out = super().forward(*args, **kwargs)
        out.logits = out.logits + self.logit_bias[: out.logits.shape[-1]]
        return out


def clean_llama(tokenizer, seed: int, layers: int = 2, hidden: int = 32) -> CleanLlama:
    from optimum_uag.engine.drafters.translation import token_bytes

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=1024, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    model = CleanLlama(cfg).eval()
    bias = torch.full((len(tokenizer),), -1e4)
    for idx, raw in token_bytes(tokenizer).items():
        try:
            raw.decode("utf-8")
            bias[idx] = 0.0
        except UnicodeDecodeError:
            pass
    model.register_buffer("logit_bias", bias, persistent=False)
    return model


def tiny_neox(vocab_size: int, seed: int, hidden: int = 32) -> GPTNeoXForCausalLM:
    torch.manual_seed(seed)
    cfg = GPTNeoXConfig(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=1,
                        num_attention_heads=4, max_position_embeddings=1024)
    return GPTNeoXForCausalLM(cfg).eval()


def pad_batch(tokenizer, texts: list[str]):
    enc = tokenizer(texts, return_tensors="pt", padding=True, return_token_type_ids=False)
    return enc["input_ids"], enc["attention_mask"]


class OracleDraft(torch.nn.Module):
    """A 'draft model' that knows the reference continuation text: it reads its context from the KV-cache slots the
    engine writes, and proposes the next token of the reference text in its own tokenizer. Used to measure the
    translation stage alone: with a perfect draft, tau is limited only by the translation."""

    def __init__(self, tokenizer, reference_texts: list[str], vocab_size: int):
        super().__init__()
        self.tok = tokenizer
        self.refs = reference_texts
        self.vocab_size = vocab_size
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.config = LlamaConfig(vocab_size=vocab_size, hidden_size=8, num_hidden_layers=1, num_attention_heads=1,
                                  max_position_embeddings=4096)
        self.generation_config = type("G", (), {"num_assistant_tokens": 20})()
        self.context: dict[int, dict[int, int]] = {}

    @property
    def device(self):
        return torch.device("cpu")

    @property
    def dtype(self):
        return torch.float32

    def get_output_embeddings(self):
        return torch.nn.Linear(1, self.vocab_size, bias=False)

    def _next(self, ids: list[int], ref: str) -> int | None:
        """A token extending decode(ids) along the reference text, or None when off the reference."""
        text = self.tok.decode(ids, skip_special_tokens=True)
        if not ref.startswith(text) or len(text) >= len(ref):
            return None
        first = self.tok(ref[len(text):], add_special_tokens=False)["input_ids"][:1]
        for cand in first + list(range(self.vocab_size)):
            grown = self.tok.decode(ids + [cand], skip_special_tokens=True)
            if len(grown) > len(text) and ref.startswith(grown):
                return cand
        return None

    def forward(self, input_ids, past_key_values=None, **kwargs):
        slots = past_key_values.slots.tolist()
        logits = torch.full((*input_ids.shape, self.vocab_size), -10.0)
        for b, row in enumerate(input_ids.tolist()):
            ctx = self.context.setdefault(b, {})
            for slot, tok in zip(slots[b], row):
                ctx[slot] = tok
            for s in [s for s in ctx if s > max(slots[b])]:  # rewound entries
                del ctx[s]
            for i, slot in enumerate(slots[b]):
                nxt = self._next([ctx[s] for s in sorted(ctx) if s <= slot], self.refs[b])
                logits[b, i, nxt if nxt is not None else 0] = 10.0
        return type("Out", (), {"logits": logits})()


def skip_or_fail_in_ci(reason: str):
    """Skip with the reason, except in CI (CI=true, as .ci/run sets it): there a failed model download or a missing
    test dependency is a broken install step, not something to skip past."""
    import os

    import pytest

    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: a skip here would hide a broken install step)")
    pytest.skip(reason)
