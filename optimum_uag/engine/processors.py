"""Logits processors (repetition_penalty, no_repeat_ngram_size, min_new_tokens, bad_words_ids, a custom
LogitsProcessorList, ...) applied to the target's logits at every position of the verify block, each with the
prefix it would have seen in the target's own generate(): the committed tokens plus the candidates before it."""
from __future__ import annotations

import torch
from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper
from transformers.generation.logits_process import (EpsilonLogitsWarper, EtaLogitsWarper, MinPLogitsWarper,
                                                    TypicalLogitsWarper)

from .state import DecodingState

# What LogitsWarper already applies in one batched call (the fast path).
_WARPERS = (TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper)
# Sampling warpers: the draft's sampler applies its own; the draft gets the other processors only.
_ALL_WARPERS = _WARPERS + (MinPLogitsWarper, TypicalLogitsWarper, EpsilonLogitsWarper, EtaLogitsWarper)


class TargetScorer:
    """Target logits (B, K + 1, V) -> the scores transformers' generate() would compute at each position.

    Built with transformers' own `_get_logits_processor` from the call's generation config, so every processor
    (and the sampling warpers when do_sample) has the same meaning and order as in target-only generation."""

    def __init__(self, model, generation_config, input_ids: torch.Tensor, max_new_tokens: int, logits_processor=None,
                 prefix_allowed_tokens_fn=None):
        self.row = 0  # the batch row being processed (prefix_allowed_tokens_fn takes it as batch_id)
        prefix_fn = None
        if prefix_allowed_tokens_fn is not None:
            prefix_fn = lambda batch_id, ids: prefix_allowed_tokens_fn(self.row, ids)  # noqa: E731
        generation_config.max_length = input_ids.shape[1] + max_new_tokens  # as generate() sets it (forced_eos)
        model._prepare_special_tokens(generation_config, True, device=input_ids.device)
        self.processors = model._get_logits_processor(
            generation_config=generation_config, input_ids_seq_length=input_ids.shape[1], encoder_input_ids=input_ids,
            prefix_allowed_tokens_fn=prefix_fn, logits_processor=logits_processor or LogitsProcessorList(),
            device=input_ids.device, model_kwargs={},
        )

    @property
    def needed(self) -> bool:
        """True when something beyond temperature / top-k / top-p applies (else the batched fast path does)."""
        return any(not isinstance(p, _WARPERS) for p in self.processors)

    def for_draft(self) -> "DraftProcessors | None":
        """The processors without the sampling warpers, for a same-tokenizer draft (better proposals; the draft
        still only proposes), or None when nothing remains."""
        rest = LogitsProcessorList([p for p in self.processors if not isinstance(p, _ALL_WARPERS)])
        return DraftProcessors(self, rest) if len(rest) else None

    def __call__(self, state: DecodingState, logits: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
        """Processed scores (B, K + 1, V), float32; rows that are done are left as they are."""
        return self.apply(self.processors, state, logits, candidates, 0)

    def apply(self, processors, state: DecodingState, logits: torch.Tensor, extra: torch.Tensor | None,
              offset: int) -> torch.Tensor:
        """Position j of logits (B, W, V) is processed after the row's committed tokens + extra[:, :offset + j].
        One row at a time: padding-sensitive processors see exactly that row."""
        scores = logits.float().clone()
        lengths, done = state.length.tolist(), state.done.tolist()
        for b in range(scores.shape[0]):
            if done[b]:
                continue
            self.row = b
            ids = state.tokens[b, : lengths[b]]
            if extra is not None:
                ids = torch.cat([ids, extra[b]])
            for j in range(scores.shape[1]):
                scores[b, j] = processors(ids[None, : lengths[b] + offset + j], scores[b, j][None])[0]
        return scores


class DraftProcessors:
    """Applies the target's (non-warper) processors to one draft step's logits (B, V), each row with its committed
    tokens plus what it drafted so far this round."""

    def __init__(self, scorer: TargetScorer, processors: LogitsProcessorList):
        self.scorer = scorer
        self.processors = processors

    def __call__(self, state: DecodingState, logits: torch.Tensor, drafted: torch.Tensor | None) -> torch.Tensor:
        offset = 0 if drafted is None else drafted.shape[1]
        return self.scorer.apply(self.processors, state, logits[:, None], drafted, offset)[:, 0]
