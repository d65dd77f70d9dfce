"""A datastore of the target's own answers: retrieval drafting (REST, He et al. 2024) for the lookup branch. An A/B
option (combined.DATASTORE_POLICY, off): on SmolLM2 with 186k tokens of its own answers to the head pool it did not
raise chat tau (benchmarks/results/datastore.json, benchmarks/bench_datastore.py).

The last few tokens of a row are looked up in a corpus of texts the target itself wrote (its greedy answers to
other requests); the continuation most of the matches share is proposed. A small model answers in stock phrases
("Here's a Python function that ...", a list's or a JSON object's scaffolding) that recur across requests, where
the row's own prompt and output (prompt lookup) have no match yet.

The index is a sorted array of each corpus position's next `key_tokens` tokens packed into one 64-bit key (16 bits
a token for vocabularies under 65,535): an n-gram (n <= key_tokens) is a contiguous range of it, found with two
binary searches. Building it sorts the corpus once (~0.1 s for a million tokens).
"""
from __future__ import annotations

import numpy as np
import torch


class Datastore:
    """`tokens`: 1D integer array, documents separated by -1 (or a list of token lists)."""

    def __init__(self, tokens, max_ngram: int = 4, min_ngram: int = 2, max_matches: int = 256):
        if isinstance(tokens, (list, tuple)):
            parts = [np.asarray(d, dtype=np.int64) for d in tokens]
            tokens = np.concatenate([np.append(p, -1) for p in parts]) if parts else np.zeros(0, np.int64)
        tokens = np.asarray(tokens).astype(np.int64)
        top = int(tokens.max(initial=0))
        self.bits = max(8, int(top + 2).bit_length())  # the separator packs as all ones
        self.key_tokens = max(1, min(64 // self.bits, max_ngram))
        self.max_ngram, self.min_ngram = min(max_ngram, self.key_tokens), max(1, min_ngram)
        self.max_matches = max_matches
        self.sep = (1 << self.bits) - 1
        self.tokens = np.where(tokens < 0, self.sep, tokens)
        self.tokens = np.append(self.tokens, [self.sep] * (self.key_tokens + 1))
        n = len(self.tokens) - self.key_tokens - 1
        keys = np.zeros(n, dtype=np.uint64)
        for j in range(self.key_tokens):
            keys = (keys << np.uint64(self.bits)) | self.tokens[j : j + n].astype(np.uint64)
        order = np.argsort(keys, kind="stable")
        self.keys, self.positions = keys[order], order.astype(np.int64)

    def __len__(self) -> int:
        return len(self.tokens) - self.key_tokens - 1

    def _range(self, gram) -> tuple[int, int]:
        pad = self.key_tokens - len(gram)
        low = high = 0
        for t in list(gram) + [None] * pad:
            low = (low << self.bits) | (0 if t is None else t)
            high = (high << self.bits) | (self.sep if t is None else t)
        return (int(np.searchsorted(self.keys, np.uint64(low), "left")),
                int(np.searchsorted(self.keys, np.uint64(high), "right")))

    def continuation(self, context: list[int], length: int) -> tuple[list[int], int]:
        """The continuation (up to `length` tokens) most matches of the longest n-gram ending `context` share, and
        that n (0 and [] where none of min_ngram..max_ngram matches). At each step the most frequent next token
        among the matches still agreeing is taken; a match ends at its document's end."""
        for n in range(min(self.max_ngram, len(context)), self.min_ngram - 1, -1):
            gram = context[-n:]
            if any(t < 0 or t >= self.sep for t in gram):
                continue
            lo, hi = self._range(gram)
            if hi <= lo:
                continue
            step = max(1, (hi - lo) // self.max_matches)
            starts = self.positions[lo:hi:step] + n
            span = self.tokens[np.minimum(starts[:, None] + np.arange(length), len(self.tokens) - 1)]
            out = []
            alive = np.ones(len(starts), dtype=bool)
            for j in range(length):
                if alive.sum() == 1:  # one match left: the rest of its document
                    rest = span[alive][0, j:]
                    stop = np.flatnonzero(rest == self.sep)
                    out += rest[: stop[0] if stop.size else len(rest)].tolist()
                    break
                column = span[alive, j]
                column = column[column != self.sep]
                if column.size == 0:
                    break
                values, counts = np.unique(column, return_counts=True)
                best = int(values[counts.argmax()])
                out.append(best)
                alive &= span[:, j] == best
            if out:
                return out, n
        return [], 0

    def propose(self, tokens: torch.Tensor, length: torch.Tensor, pad: torch.Tensor, k: int):
        """Per row of a (B, capacity) token buffer: (candidates (B, k), valid (B, k), n (B,)), the continuation of
        each row's last tokens (from its pad on). One host read of the rows' last max_ngram tokens."""
        batch = tokens.shape[0]
        starts = (length - self.max_ngram).clamp_min(0)
        index = (starts[:, None] + torch.arange(self.max_ngram, device=tokens.device)).clamp_max(tokens.shape[1] - 1)
        last = tokens.gather(1, index)
        rows, lengths, pads, starts = (x.tolist() for x in (last, length, pad, starts))
        out = torch.zeros(batch, k, dtype=torch.long)
        valid = torch.zeros(batch, k, dtype=torch.bool)
        matched = torch.zeros(batch, dtype=torch.long)
        for b in range(batch):
            context = rows[b][max(0, pads[b] - starts[b]) : lengths[b] - starts[b]]
            cont, n = self.continuation(context, k)
            if cont:
                out[b, : len(cont)] = torch.tensor(cont)
                valid[b, : len(cont)] = True
                matched[b] = n
        device = tokens.device
        return out.to(device), valid.to(device), matched.to(device)


def answer_spans(seqs: list[dict]) -> list[list[int]]:
    """The runs of loss-masked (answer) tokens of train-draft's sequences (cli/train_draft.token_sequences: the chat
    template's tokens), one document each."""
    docs = []
    for seq in seqs:
        run = []
        for token, answer in zip(seq["ids"], seq["loss_mask"]):
            if answer:
                run.append(int(token))
            elif run:
                docs.append(run)
                run = []
        if run:
            docs.append(run)
    return [d for d in docs if len(d) >= 2]
