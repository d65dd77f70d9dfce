"""Draft stage: propose up to k candidate tokens per row (draft model, or n-gram prompt lookup)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..runners.registry import make_runner
from .state import DecodingState, Proposal
from .verify import LogitsWarper


def output_vocab_size(model) -> int:
    """Rows of the LM head (may exceed the tokenizer: padded embedding matrices), else config.vocab_size."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    rows = getattr(head, "out_features", None)  # quantized linears (INC, torch.ao) keep it; .weight may be a method
    if rows is None:
        weight = getattr(head, "weight", None)
        rows = weight.shape[0] if isinstance(weight, torch.Tensor) else None
    return int(rows) if rows is not None else int(model.config.vocab_size)


def fit_vocab(logits: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Slice or -inf-pad the last dimension to vocab_size (padded embedding matrices differ in size)."""
    extra = vocab_size - logits.shape[-1]
    if extra == 0:
        return logits
    if extra < 0:
        return logits[..., :vocab_size]
    return F.pad(logits, (0, extra), value=float("-inf"))


class TokenSampler:
    """Picks the next draft token: argmax (greedy) or a sample from the warped distribution."""

    def __init__(self, warper: LogitsWarper | None, need_confidence: bool):
        self.warper = warper
        self.need_confidence = need_confidence

    def __call__(self, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """(token (B,), its distribution (B, V) when sampling, the token's probability when needed)."""
        if self.warper is None:
            token = logits.argmax(-1)
            conf = torch.softmax(logits, -1).max(-1).values if self.need_confidence else None
            return token, None, conf
        probs = self.warper.probs(logits)
        token = torch.multinomial(probs, 1).squeeze(-1)
        conf = probs.gather(-1, token[:, None]).squeeze(-1) if self.need_confidence else None
        return token, probs, conf


def draft_loop(runner, logits: torch.Tensor, k: int, pick, positions: torch.Tensor,
               threshold: float | None, done: torch.Tensor) -> tuple[torch.Tensor, list]:
    """Draft up to k tokens autoregressively from the first next-token logits (B, V).

    pick(logits) -> (token, distribution or None, confidence or None); positions: (B,) slot of the first new
    token. Stops early when every active row's confidence is below `threshold` (the "confidence" schedule)."""
    tokens, dists = [], []
    for i in range(k):
        token, dist, conf = pick(logits)
        tokens.append(token)
        dists.append(dist)
        if i + 1 == k:
            break
        if threshold is not None and bool(((conf < threshold) | done).all()):
            break
        logits = runner.forward(token[:, None], positions + i, logits_to_keep=1)[:, -1]
    return torch.stack(tokens, 1), dists


class ModelDrafter:
    """Draft with an assistant model that shares the target's tokenizer (classic assisted generation).

    The assistant's static cache mirrors the target's slots. Each round it re-reads the last two committed
    tokens (one of them is new; re-writing an already cached slot is harmless), so its input width is fixed.
    """

    def __init__(self, assistant_model, state: DecodingState, capacity: int, vocab_size: int, sampler: TokenSampler,
                 confidence_threshold: float | None, runner_factory=make_runner, processors=None):
        self.runner = runner_factory(assistant_model, state.batch_size, capacity, state.pad, role="assistant")
        limit = getattr(assistant_model.config, "max_position_embeddings", None)
        # a draft with fewer positions than this call needs stops drafting there (the target goes on alone)
        self.limit = limit if isinstance(limit, int) and 0 < limit < capacity else None
        self.vocab_size = vocab_size
        self.processors = processors  # the target's logits processors (repetition_penalty, ...), or None
        self.sampler = sampler
        self.threshold = confidence_threshold

    def propose(self, state: DecodingState, k: int) -> Proposal:
        if self.limit is not None and int((state.length - state.pad).max()) + k > self.limit:
            last = state.window(state.length - 1, 1)
            return Proposal(tokens=last, valid=torch.zeros_like(last, dtype=torch.bool))
        if state.round == 0:
            start, width = torch.zeros_like(state.length), state.prompt_len
        else:
            start, width = state.length - 2, 2
        logits = self.runner.forward(state.window(start, width), start, logits_to_keep=1)[:, -1]
        drafted: list[torch.Tensor] = []

        def pick(x):
            x = fit_vocab(x, self.vocab_size)
            if self.processors is not None:
                x = self.processors(state, x, torch.stack(drafted, 1) if drafted else None)
            out = self.sampler(x)
            drafted.append(out[0])
            return out

        tokens, dists = draft_loop(self.runner, logits, k, pick, state.length, self.threshold, state.done)
        probs = torch.stack(dists, 1) if dists[0] is not None else None
        return Proposal(tokens=tokens, probs=probs)

    @property
    def shapes(self):
        return self.runner.shapes


class PromptLookupDrafter:
    """Prompt lookup decoding: propose the tokens that followed the latest earlier match of the last n-gram."""

    def __init__(self, max_ngram_size: int, vocab_size: int, sampling: bool):
        self.max_ngram_size = max(1, max_ngram_size)
        self.vocab_size = vocab_size
        self.sampling = sampling
        self.shapes: set = set()

    def propose(self, state: DecodingState, k: int) -> Proposal:
        tokens, length = state.tokens, state.length
        batch, capacity = tokens.shape
        best = torch.full((batch,), -1, dtype=torch.long, device=tokens.device)  # continuation start
        for n in range(self.max_ngram_size, 0, -1):
            last = state.window((length - n).clamp_min(0), n)
            windows = tokens.unfold(1, n, 1)  # (B, capacity - n + 1, n)
            starts = torch.arange(windows.shape[1], device=tokens.device)
            hit = (windows == last[:, None]).all(-1)
            hit &= (starts >= state.pad[:, None]) & (starts + n < length[:, None]) & ((length - n) >= state.pad)[:, None]
            latest = torch.where(hit, starts, -1).max(1).values
            best = torch.where((best < 0) & (latest >= 0), latest + n, best)
        offsets = torch.arange(k, device=tokens.device)
        index = (best.clamp_min(0)[:, None] + offsets).clamp_max(capacity - 1)
        candidates = tokens.gather(1, index)
        valid = (best[:, None] >= 0) & (index < length[:, None])
        last_token = state.window(length - 1, 1)
        candidates = torch.where(valid, candidates, last_token)
        probs = F.one_hot(candidates, self.vocab_size).float() if self.sampling else None
        return Proposal(tokens=candidates, probs=probs, valid=valid)
