"""Decoding state shared by the stages: the committed target-token buffer and per-row lengths."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class Proposal:
    """Draft (+ translate) output: candidate target ids, and the distributions they were drawn from."""

    tokens: torch.Tensor  # (B, k) target-vocabulary ids
    probs: torch.Tensor | None = None  # (B, k, V_target) draft distribution per candidate (sampling only)
    valid: torch.Tensor | None = None  # (B, k) bool, False where a row has no real candidate
    record: object = None  # what the drafter's propose() leaves for its commit()
    tree: object = None  # engine/tree.py Tree: the candidates are the nodes of a draft tree, not a chain


@dataclass
class DecodingState:
    """Committed tokens of every row in one static buffer; row b's tokens are tokens[b, :length[b]].

    Slot j of the target KV cache holds tokens[:, j]; left padding occupies slots < pad[b].
    """

    tokens: torch.Tensor  # (B, T) target ids, pad beyond each row's length
    length: torch.Tensor  # (B,) committed slots (prompt incl. padding + generated)
    pad: torch.Tensor  # (B,) left-padding slots
    prompt_len: int
    max_new_tokens: int
    done: torch.Tensor = field(default=None)  # (B,) bool
    generated: torch.Tensor = field(default=None)  # (B,) new tokens committed
    round: int = 0
    # the adaptive policy's stop for this round's chain (engine/policy.py AdaptivePolicy.gate): a drafted token is
    # kept while the active rows' mean cumulative draft probability stays at or above it (None: no gate)
    draft_gate: float | None = None
    # the most tokens a row committed in the last round, read in that round's one host sync; set by the loop on eager
    # backends under the adaptive policy, whose rounds draft any length (None: drafters catch up at their fixed width)
    round_max_new: int | None = None

    @classmethod
    def create(cls, input_ids: torch.Tensor, pad: torch.Tensor, capacity: int, pad_token_id: int, max_new_tokens: int):
        batch, prompt_len = input_ids.shape
        tokens = torch.full((batch, capacity), pad_token_id, dtype=torch.long, device=input_ids.device)
        tokens[:, :prompt_len] = input_ids
        zeros = torch.zeros(batch, dtype=torch.long, device=input_ids.device)
        return cls(
            tokens=tokens, length=zeros + prompt_len, pad=pad, prompt_len=prompt_len, max_new_tokens=max_new_tokens,
            done=torch.zeros(batch, dtype=torch.bool, device=input_ids.device), generated=zeros.clone(),
        )

    @property
    def batch_size(self) -> int:
        return self.tokens.shape[0]

    def window(self, start: torch.Tensor, width: int) -> torch.Tensor:
        """tokens[b, start[b] : start[b] + width] for every row, as one (B, width) gather."""
        index = start[:, None] + torch.arange(width, device=start.device)
        return self.tokens.gather(1, index)

    def sequences(self) -> torch.Tensor:
        """Prompt + generated tokens, padded with pad_token_id after a row's end (as transformers)."""
        return self.tokens[:, : self.prompt_len + int(self.generated.max())]
