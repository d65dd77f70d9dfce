"""Tokenizer bridging for Universal Assisted Generation.

- `same_vocabulary`: decide whether two tokenizers map text to the same ids (vocabulary + normalization).
- `TextBridge`: incremental text <-> token conversions for one tokenizer, on short windows only (the cost of a
  call never grows with the sequence length).
- `VocabularyIntersection`: tokens with the same byte string in both vocabularies (TLI), as index maps.
"""
from __future__ import annotations

import json
import warnings
import torch

REPLACEMENT = "\ufffd"


def _pipeline(tokenizer) -> tuple:
    """The parts of a tokenizer that decide how text becomes ids (vocabulary aside)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return (type(tokenizer).__name__,)
    spec = json.loads(backend.to_str())
    model = {k: v for k, v in spec.get("model", {}).items() if k not in ("vocab", "merges")}
    return tuple(json.dumps(spec.get(key), sort_keys=True) for key in ("normalizer", "pre_tokenizer")) + (
        json.dumps(model, sort_keys=True),
    )


def same_vocabulary(tokenizer, assistant_tokenizer) -> bool:
    """True when both tokenizers map text to the same ids (same vocabulary and normalization), whatever their size.
    Computed once per pair (a 256k vocabulary costs ~0.1 s to compare) and kept weakly."""
    if tokenizer is assistant_tokenizer:
        return True
    from ...registry import cached_for_pair

    return cached_for_pair(tokenizer, assistant_tokenizer, "same_vocabulary", lambda: (
        len(tokenizer) == len(assistant_tokenizer) and tokenizer.get_vocab() == assistant_tokenizer.get_vocab()
        and _pipeline(tokenizer) == _pipeline(assistant_tokenizer)))


def common_prefix_len(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class TextBridge:
    """Decode a few tokens to text and encode text to tokens that continue a given token window."""

    def __init__(self, tokenizer):
        if not getattr(tokenizer, "is_fast", False):
            raise ValueError(
                f"{type(tokenizer).__name__} is a slow tokenizer; Universal Assisted Generation needs offsets, so "
                "load both tokenizers with AutoTokenizer.from_pretrained(..., use_fast=True)"
            )
        self.tokenizer = tokenizer
        self.special_ids = set(tokenizer.all_special_ids)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)

    def decode_many(self, rows: list[list[int]]) -> list[str]:
        return self.tokenizer.batch_decode(rows, skip_special_tokens=True, clean_up_tokenization_spaces=False)

    def continuations(self, windows: list[list[int]], texts: list[str]) -> list[list[int] | None]:
        """For each row, ids that follow `window` and spell `text`: re-encode decode(window) + text and cut at the
        window's end. None where the tokenizer merges across that point (no token starts exactly there)."""
        heads = self.decode_many(windows)
        enc = self.tokenizer(
            [h + t for h, t in zip(heads, texts)], add_special_tokens=False, return_offsets_mapping=True
        )
        out = []
        for head, text, ids, offsets in zip(heads, texts, enc["input_ids"], enc["offset_mapping"]):
            if not text:
                out.append([])
                continue
            cut = len(head)
            found = None
            for i, (start, end) in enumerate(offsets):
                if start >= cut and end > start:
                    found = i if start == cut and (i == 0 or offsets[i - 1][1] <= cut) else None
                    break
            out.append(None if found is None else ids[found:])
        return out

    def encode_alone(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte-level alphabet: every byte as a printable character (the table ByteLevel BPE vocabularies use;
    transformers moved its copy between releases)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = list(printable), 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return dict(zip(printable, (chr(c) for c in chars)))


def token_bytes(tokenizer) -> dict[int, bytes]:
    """The byte string each (non-special) token spells, space markers ('Ġ', '▁') and <0xNN> normalized."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    spec = json.loads(backend.to_str()) if backend is not None else {}
    decoder = json.dumps(spec.get("decoder"))
    special = set(tokenizer.all_special_ids)
    out = {}
    if '"ByteLevel"' in decoder:
        byte_decoder = {c: b for b, c in _bytes_to_unicode().items()}
        for token, idx in tokenizer.get_vocab().items():
            if idx not in special and all(c in byte_decoder for c in token):
                out[idx] = bytes(byte_decoder[c] for c in token)
        return out
    for token, idx in tokenizer.get_vocab().items():
        if idx in special:
            continue
        if len(token) == 6 and token.startswith("<0x") and token.endswith(">"):
            try:
                out[idx] = bytes([int(token[3:5], 16)])
            except ValueError:
                out[idx] = token.encode()
        else:
            out[idx] = token.replace("▁", " ").encode("utf-8")
    return out


class VocabularyIntersection:
    """Index maps between the two vocabularies over tokens that spell the same bytes (TLI, Timor et al. 2025)."""

    def __init__(self, tokenizer, assistant_tokenizer, draft_vocab_size: int):
        target = token_bytes(tokenizer)
        by_bytes = {}
        for idx, b in target.items():
            by_bytes.setdefault(b, idx)
        pairs = sorted((d, by_bytes[b]) for d, b in token_bytes(assistant_tokenizer).items() if b in by_bytes and d < draft_vocab_size)
        self.draft_ids = torch.tensor([d for d, _ in pairs], dtype=torch.long)
        self.target_ids = torch.tensor([t for _, t in pairs], dtype=torch.long)
        self.size = len(pairs)
        self.coverage = self.size / max(1, min(len(target), len(assistant_tokenizer)))
        # draft id -> target id (or -1): for mapping sampled draft tokens
        self.draft_to_target = torch.full((draft_vocab_size,), -1, dtype=torch.long)
        self.draft_to_target[self.draft_ids] = self.target_ids

    def to(self, device):
        self.draft_ids, self.target_ids = self.draft_ids.to(device), self.target_ids.to(device)
        self.draft_to_target = self.draft_to_target.to(device)
        return self


def vocabulary_intersection(tokenizer, assistant_tokenizer, draft_vocab_size: int) -> VocabularyIntersection:
    """Computed once per tokenizer pair and kept weakly (dropped with either tokenizer)."""
    from ...registry import cached_for_pair

    inter = cached_for_pair(tokenizer, assistant_tokenizer, f"intersection:{draft_vocab_size}",
                            lambda: VocabularyIntersection(tokenizer, assistant_tokenizer, draft_vocab_size))
    if inter.size == 0:
        raise ValueError(
            "the assistant's vocabulary has no token in common with the target's (no identical byte strings), "
            "so Universal Assisted Generation cannot help: its proposals could never match; choose an assistant "
            "whose tokenizer covers the same text (e.g. the same script/byte-level pieces)"
        )
    return inter


_WARNED: set = set()


def warn_once(key: str, message: str) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        warnings.warn(message, stacklevel=3)
