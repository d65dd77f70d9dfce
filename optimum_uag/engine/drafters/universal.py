"""Universal Assisted Generation: a draft model with a different tokenizer, behind the Drafter interface.

draft      the assistant proposes k tokens in its own vocabulary, on its own static cache
translate  greedy: draft text -> target tokens (re-encode a window, cut at the committed end, align with the
           committed target tokens not yet mirrored in the draft); sampling: token-level intersection (TLI),
           one draft token = one target token
commit     the new target text -> draft tokens: keep the draft tokens that still spell a prefix of it, rewind
           the draft cache to there, re-encode only the remainder and re-feed it (fixed re-feed width)
"""
from __future__ import annotations

import time

import torch

from ...runners.common import PROMPT_BUCKET
from ...runners.registry import make_runner
from ..sampling import TokenSampler, output_vocab_size
from ..state import DecodingState, Proposal
from .base import Drafter, DraftStats, draft_loop
from .translation import REPLACEMENT, TextBridge, common_prefix_len, vocabulary_intersection, warn_once

WINDOW = 6  # tokens of committed context used when decoding/re-encoding (constant cost per round)
MIN_INTERSECTION = 0.05  # below this share of the smaller vocabulary, TLI cannot propose much


class UniversalDrafter(Drafter):
    """Draft stage for an assistant whose tokenizer differs from the target's (UAG)."""

    def __init__(self, assistant_model, tokenizer, assistant_tokenizer, state: DecodingState, capacity: int,
                 vocab_size: int, sampler: TokenSampler, confidence_threshold: float | None, cfg,
                 runner_factory=make_runner):
        self.target_text = TextBridge(tokenizer)
        self.draft_text = TextBridge(assistant_tokenizer)
        self.vocab_size = vocab_size
        self.sampler = sampler
        self.threshold = confidence_threshold
        self.translate_seconds = 0.0
        self.target_eos = list(cfg.eos_token_ids)
        self.draft_eos = assistant_tokenizer.eos_token_id
        self.draft_special = self.draft_text.special_ids
        self.refeed_width = max(4, cfg.num_assistant_tokens)
        device = state.tokens.device
        draft_vocab = output_vocab_size(assistant_model)
        self.tli = None
        inter = vocabulary_intersection(tokenizer, assistant_tokenizer, draft_vocab)  # raises when empty
        if cfg.do_sample:
            if inter.coverage < MIN_INTERSECTION:
                warn_once("tli-small", f"the two vocabularies share only {inter.size} tokens ({inter.coverage:.1%}); "
                          "sampling falls back to string-level drafting (proposals are deterministic, still lossless)")
            else:
                self.tli = inter.to(device)

        # Draft prompt: the target prompt's text in the assistant's tokens (its own BOS), left-padded.
        # Host mirrors of the committed tokens (slot-indexed), so that a round never reads more than a window.
        self.target_host = state.tokens[:, : state.prompt_len].tolist()
        self.target_pad = state.pad.tolist()
        texts = self.target_text.decode_many([row[p:] for row, p in zip(self.target_host, self.target_pad)])
        enc = assistant_tokenizer(texts, add_special_tokens=True)["input_ids"]
        for text, ids in zip(texts, enc):
            if self.draft_text.decode(ids) != text:
                warn_once("roundtrip", "the assistant tokenizer does not reproduce the prompt text exactly "
                          f"({text[:40]!r}...); drafts may be accepted less often (output stays exact)")
                break
        start = self._start_token(assistant_tokenizer)
        enc = [e if e else [start] for e in enc]  # a BOS-only target prompt has no text: start from a special token
        self.pad_id = assistant_tokenizer.pad_token_id if assistant_tokenizer.pad_token_id is not None else start
        self.model, self.runner_factory = assistant_model, runner_factory
        self.margin = cfg.max_assistant_tokens + self.refeed_width + 2  # slots one round may need past the end
        # Size the buffer from what this prompt costs in draft tokens per target token (a byte-level draft may
        # spend 4 per character); when it still fills up, the window slides (never an error).
        ratio = max(len(e) / max(1, len(r) - p) for e, r, p in zip(enc, self.target_host, self.target_pad))
        self.capacity = -(-(max(len(e) for e in enc) + int(max(2.0, 1.5 * ratio) * (cfg.max_new_tokens + 8))
                            + self.margin) // PROMPT_BUCKET) * PROMPT_BUCKET
        limit = getattr(assistant_model.config, "max_position_embeddings", None)
        self.max_positions = limit if isinstance(limit, int) and limit > 0 else None
        self.synced = [state.prompt_len] * state.batch_size  # target tokens mirrored in the draft
        self.slides = 0
        self._shapes: set = set()
        self._reset([list(e) for e in enc], device)

    @staticmethod
    def _start_token(assistant_tokenizer) -> int:
        """A token to start the draft from when a row has no text yet: its BOS, else EOS, else pad, else 0."""
        for tid in (assistant_tokenizer.bos_token_id, assistant_tokenizer.eos_token_id, assistant_tokenizer.pad_token_id):
            if tid is not None:
                return tid
        return 0

    def _reset(self, rows: list[list[int]], device) -> None:
        """(Re)start the draft from these committed tokens per row: left-padded to a bucket, fresh cache.

        Used at the start and whenever a row would run past the buffer or the draft's max_position_embeddings:
        then each row keeps its latest tokens (the window slides); the target's output never depends on it."""
        room = self.capacity - self.margin - 1
        if self.max_positions is not None:
            room = min(room, self.max_positions - self.margin - 1)
        if room < 2:
            raise ValueError(f"the assistant's max_position_embeddings ({self.max_positions}) leaves no room to draft "
                             f"{self.margin - self.refeed_width - 2} tokens; lower num_assistant_tokens")
        keep = room // 2 if self.slides else room  # after a slide, half the room stays free for what follows
        rows = [r[-keep:] for r in rows]
        longest = min(self.capacity - self.margin, -(-max(len(r) for r in rows) // PROMPT_BUCKET) * PROMPT_BUCKET)
        self.prompt_len = longest
        self.draft_pad = [longest - len(r) for r in rows]
        self.host = [[self.pad_id] * pad + r for pad, r in zip(self.draft_pad, rows)]
        self.tokens = torch.full((len(rows), self.capacity), self.pad_id, dtype=torch.long, device=device)
        self.tokens[:, :longest] = torch.tensor(self.host, device=device)
        self.length = [longest] * len(rows)  # committed draft tokens (their text == target text[:synced])
        self.processed = [0] * len(rows)  # draft tokens whose KV entries are valid
        self.pad = torch.tensor(self.draft_pad, device=device)  # device view of draft_pad, for the runner's mask
        if getattr(self, "runner", None) is not None:
            self._shapes |= self.runner.shapes
            close = getattr(self.runner, "close", None)
            if close is not None:  # a Gaudi runner holds the draft's static cache: one live runner per model
                close()
        self.runner = self.runner_factory(self.model, len(rows), self.capacity, self.pad, role="assistant")
        self.limits = [self.capacity - self.margin if self.max_positions is None
                       else min(self.capacity, p + self.max_positions) - self.margin for p in self.draft_pad]

    def stats(self) -> DraftStats:
        return DraftStats(shapes=sorted(self._shapes | self.runner.shapes), forwards=self.runner.calls,
                          translate_seconds=self.translate_seconds)

    # ------------------------------------------------------------------------------------------ draft
    def _catch_up(self) -> torch.Tensor:
        """Feed the committed draft tokens the cache lacks; return the logits after the last one (B, V)."""
        device = self.tokens.device
        if not any(self.processed):  # first round: the whole draft prompt
            start = torch.zeros(len(self.length), dtype=torch.long, device=device)
            logits = self.runner.forward(self.tokens[:, : self.prompt_len], start, logits_to_keep=1)[:, -1]
            self.processed = list(self.length)
            return logits
        width, offsets = self.refeed_width, torch.arange(self.refeed_width, device=device)
        rows = torch.arange(len(self.length), device=device)
        while True:  # fixed width W; more than W missing tokens (rare) take several passes
            # Re-read at least the last committed token, so that every row yields next-token logits.
            todo = [max(1, ln - pr) for ln, pr in zip(self.length, self.processed)]
            starts = [ln - t for ln, t in zip(self.length, todo)]
            take = [min(t, width) for t in todo]
            start = torch.tensor(starts, device=device)
            # logits only from the earliest position a row needs: a 256k-token draft vocabulary makes every
            # extra position an LM-head product and a megabyte copied
            keep = width - min(take) + 1
            logits = self.runner.forward(self.tokens.gather(1, start[:, None] + offsets), start, logits_to_keep=keep)
            self.processed = [s + t for s, t in zip(starts, take)]
            if max(todo) <= width:
                return logits[rows, torch.tensor(take, device=device) - 1 - (width - keep)]

    def propose(self, state: DecodingState, k: int) -> Proposal:
        logits = self._catch_up()
        base = torch.tensor(self.length, device=self.tokens.device)
        pick = self._sample_in_intersection if self.tli is not None else self.sampler
        drafted, dists = draft_loop(self.runner, logits, k, pick, base, self.threshold, state.done,
                                     state.draft_gate)
        self.tokens.scatter_(1, base[:, None] + torch.arange(drafted.shape[1], device=base.device), drafted)
        self.processed = [ln + drafted.shape[1] - 1 for ln in self.length]
        t0 = time.perf_counter()
        proposal = self._translate_tli(drafted, dists) if self.tli is not None else self._translate_text(state, drafted, k)
        self.translate_seconds += time.perf_counter() - t0
        return proposal

    def _sample_in_intersection(self, logits: torch.Tensor):
        """Sample from the draft distribution restricted and renormalized to the shared tokens (TLI)."""
        probs = self.sampler.warper.probs(logits)[:, self.tli.draft_ids]  # (B, |I|)
        mass = probs.sum(-1, keepdim=True)
        probs = torch.where(mass > 0, probs / mass.clamp_min(1e-30), torch.full_like(probs, 1.0 / probs.shape[-1]))
        pick = torch.multinomial(probs, 1).squeeze(-1)
        conf = probs.gather(-1, pick[:, None]).squeeze(-1) if self.sampler.need_confidence else None
        return self.tli.draft_ids[pick], probs, conf

    # -------------------------------------------------------------------------------------- translate
    def _translate_tli(self, drafted: torch.Tensor, dists: list) -> Proposal:
        batch, k = drafted.shape
        q = torch.zeros(batch, k, self.vocab_size, device=drafted.device)
        # index_add: several draft tokens may spell the same target token; their mass adds up
        q.index_add_(2, self.tli.target_ids, torch.stack(dists, 1))
        record = {"drafted": drafted.tolist(), "texts": None}
        return Proposal(tokens=self.tli.draft_to_target[drafted], probs=q, record=record)

    def _draft_texts(self, drafted_rows: list[list[int]]) -> list[list[str]]:
        """Per row, the text spelled by drafted[:i] for i = 0..k (decoded after a window of committed tokens)."""
        k = len(drafted_rows[0])
        windows = [self._draft_window(b, ln) for b, ln in enumerate(self.length)]
        texts = self.draft_text.decode_many([w + d[:i] for w, d in zip(windows, drafted_rows) for i in range(k + 1)])
        out = []
        for b in range(len(drafted_rows)):
            row = texts[b * (k + 1) : (b + 1) * (k + 1)]
            head = row[0]
            cum = []
            for t in row:
                n = len(head) if t.startswith(head) else common_prefix_len(head, t)
                cum.append(t[n:])
            out.append(cum)
        return out

    def _first_special(self, row: list[int]) -> int:
        """Index of the first special draft token (EOS, BOS, ...) in a drafted row, or its length."""
        return next((i for i, t in enumerate(row) if t in self.draft_special), len(row))

    def _translate_text(self, state: DecodingState, drafted: torch.Tensor, width: int) -> Proposal:
        """Greedy UAG: draft tokens -> text -> target tokens continuing the committed target tokens."""
        rows = drafted.tolist()
        texts = self._draft_texts(rows)
        lengths = state.length.tolist()
        new_texts, eos_hits = [], []
        for b, row in enumerate(rows):
            # Stop at the first special draft token; a draft EOS becomes a target EOS candidate.
            stop = self._first_special(row)
            eos_hits.append(stop < len(row) and row[stop] == self.draft_eos and bool(self.target_eos))
            # Hold back draft tokens that end inside a UTF-8 character (their text decodes to U+FFFD).
            clean = next(i for i in range(stop, -1, -1) if not texts[b][i].endswith(REPLACEMENT))
            eos_hits[-1] &= clean == stop
            new_texts.append(texts[b][clean])
        windows = [self._target_window(b, s) for b, s in enumerate(self.synced)]
        conts = self.target_text.continuations(windows, new_texts)
        cand_rows, valid_rows = [], []
        for b, cont in enumerate(conts):
            if cont is None:  # the last committed target token would merge with the new text: encode it alone
                cont = self.target_text.encode_alone(new_texts[b]) if self.synced[b] == lengths[b] else []
            pending = self.target_host[b][self.synced[b] : lengths[b]]  # committed, not yet mirrored in the draft
            if pending:
                cont = cont[len(pending):] if cont[: len(pending)] == pending else []
            if eos_hits[b]:
                cont = cont + [self.target_eos[0]]
            cont = cont[:width]
            cand_rows.append(cont + [0] * (width - len(cont)))
            valid_rows.append([True] * len(cont) + [False] * (width - len(cont)))
        # one host tensor per round (no per-row writes: on Gaudi each varying slice would be a new lazy graph)
        candidates = torch.tensor(cand_rows, dtype=torch.long).reshape(len(rows), width)
        valid = torch.tensor(valid_rows, dtype=torch.bool).reshape(len(rows), width)
        record = {"drafted": rows, "texts": texts}
        device = state.tokens.device
        # With sampling, these proposals are deterministic given the draft (no draft distribution).
        return Proposal(tokens=candidates.to(device), valid=valid.to(device), record=record)

    # ----------------------------------------------------------------------------------------- commit
    def _draft_window(self, b: int, end: int) -> list[int]:
        return self.host[b][max(self.draft_pad[b], end - WINDOW) : end]

    def _target_window(self, b: int, end: int) -> list[int]:
        return self.target_host[b][max(self.target_pad[b], end - WINDOW) : end]

    def _text_after(self, b: int, start: int, end: int) -> str:
        """Text of this row's committed draft tokens [start, end), decoded after a window of earlier tokens."""
        lo = max(self.draft_pad[b], start - WINDOW)
        head, full = self.draft_text.decode_many([self.host[b][lo:start], self.host[b][lo:end]])
        return full[len(head):] if full.startswith(head) else full[common_prefix_len(head, full):]

    def _new_target_text(self, lengths: list[int]) -> tuple[list[str], list[int]]:
        """Per row: the committed target text not yet mirrored in the draft, and the target length it reaches.

        A target token that ends inside a UTF-8 character stays pending until a later token completes it."""
        starts = [max(self.target_pad[b], s - WINDOW) for b, s in enumerate(self.synced)]
        rows = self.target_host
        texts = self.target_text.decode_many(
            [rows[b][lo:s] for b, (lo, s) in enumerate(zip(starts, self.synced))]
            + [rows[b][lo:ln] for b, (lo, ln) in enumerate(zip(starts, lengths))])
        batch = len(lengths)
        news, reach = [], []
        for b in range(batch):
            head, full, end = texts[b], texts[batch + b], lengths[b]
            while full.endswith(REPLACEMENT) and end > self.synced[b]:
                end -= 1
                full = self.target_text.decode(rows[b][starts[b]:end])
            cut = len(head) if full.startswith(head) else common_prefix_len(head, full)
            news.append(full[cut:])
            reach.append(end)
        return news, reach

    def commit(self, state: DecodingState, proposal: Proposal, verdict, n_new: torch.Tensor) -> None:
        """Mirror the newly committed target text in the draft's tokens; rewind its cache to what still holds."""
        t0 = time.perf_counter()
        record = proposal.record or {"drafted": [[] for _ in range(state.batch_size)], "texts": None}
        self._commit(state, record, n_new, verdict.tokens.shape[1])
        self.translate_seconds += time.perf_counter() - t0

    def skipped(self, state: DecodingState, verdict, n_new: torch.Tensor) -> None:
        """Mirror the target's own token in the draft's text (its cache catches up at the next propose)."""
        self.commit(state, Proposal(tokens=verdict.tokens[:, :0]), verdict, n_new)

    def _commit(self, state: DecodingState, record: dict, n_new: torch.Tensor, width: int) -> None:
        rows, texts = record["drafted"], record["texts"] or self._draft_texts(record["drafted"])
        lengths, counts = state.length.tolist(), n_new.tolist()
        block = state.window(state.length - n_new, width).tolist()  # the new tokens only
        for b, (row, n) in enumerate(zip(block, counts)):
            self.target_host[b].extend(row[:n])
        news, reach = self._new_target_text(lengths)
        remainders, windows, bases = [], [], []
        for b, row in enumerate(rows):
            # Longest run of drafted tokens (before any special one) whose text is a prefix of the new text:
            # their KV entries stay, the rest of the draft cache is rewound.
            stop = self._first_special(row)
            keep = next((i for i in range(stop, 0, -1) if texts[b][i] and news[b].startswith(texts[b][i])), 0)
            base = self.length[b] + keep
            remainders.append(news[b][len(texts[b][keep]) if keep else 0 :])
            self.host[b][self.length[b]:] = row[:keep]
            windows.append(self._draft_window(b, base))
            bases.append(base)
            self.synced[b] = reach[b]
        for b, cont in enumerate(self.draft_text.continuations(windows, remainders)):
            base = bases[b]
            back = 0
            while cont is None:  # the last kept draft token merges with the remainder: re-encode it as well
                back += 1
                if back > WINDOW or base - back <= self.draft_pad[b]:  # keep every token, encode the rest alone
                    cont = self.draft_text.encode_alone(remainders[b])
                    break
                text = self._text_after(b, base - back, bases[b]) + remainders[b]
                cont = self.draft_text.continuations([self._draft_window(b, base - back)], [text])[0]
                if cont is not None:
                    base -= back
            self.host[b][base:] = cont
            self.length[b] = base + len(cont)
            self.processed[b] = min(self.processed[b], base)
        # one fixed-shape host-to-device copy of the committed rows (per-row slices at Python-int offsets would
        # make one lazy-mode graph per offset on Gaudi)
        cap = self.capacity
        self.tokens.copy_(torch.tensor([h[:cap] + [self.pad_id] * (cap - len(h[:cap])) for h in self.host]))
        if any(ln >= lim for ln, lim in zip(self.length, self.limits)):  # slide the window (rare)
            self.slides += 1
            self._reset([h[p:ln] for h, p, ln in zip(self.host, self.draft_pad, self.length)], self.tokens.device)
