"""Commit stage: append each row's accepted tokens and the target's own token; stop rows at EOS / criteria."""
from __future__ import annotations

import torch

from .state import DecodingState
from .verify import Verdict


def commit(state: DecodingState, verdict: Verdict, eos_ids: torch.Tensor | None, stopping_criteria=None,
           agree=None) -> torch.Tensor:
    """Append each row's new tokens, stopping at EOS / max_new_tokens; return how many each row took.
    `agree(n_new, stopped)` (multi-card) replaces this rank's decision with rank 0's."""
    width = verdict.tokens.shape[1]
    offsets = torch.arange(width, device=state.tokens.device)
    n_new = verdict.accepted + 1
    hit_eos = torch.zeros_like(state.done)
    if eos_ids is not None:
        is_eos = torch.isin(verdict.tokens, eos_ids) & (offsets < n_new[:, None])
        hit_eos = is_eos.any(1)
        n_new = torch.where(hit_eos, is_eos.long().argmax(1) + 1, n_new)
    n_new = torch.minimum(n_new, state.max_new_tokens - state.generated)
    n_new = torch.where(state.done, 0, n_new)
    slots = state.length[:, None] + offsets
    current = state.tokens.gather(1, slots)
    state.tokens.scatter_(1, slots, torch.where(offsets < n_new[:, None], verdict.tokens, current))
    if stopping_criteria:
        n_new, stopped = _apply_stopping_criteria(state, n_new, stopping_criteria)
        hit_eos |= stopped
    if agree is not None:
        n_new, hit_eos = agree(n_new, hit_eos)  # every rank takes rank 0's tokens and stops (same verdict tokens)
        state.tokens.scatter_(1, slots, torch.where(offsets < n_new[:, None], verdict.tokens, current))
    state.length += n_new
    state.generated += n_new
    state.done |= (hit_eos & (n_new > 0)) | (state.generated >= state.max_new_tokens)
    return n_new


def _apply_stopping_criteria(state: DecodingState, n_new: torch.Tensor, criteria) -> tuple[torch.Tensor, torch.Tensor]:
    """User stopping criteria, checked after every new token of every row (as transformers does per step)."""
    n_list = n_new.tolist()
    stopped = [False] * len(n_list)
    for row, n in enumerate(n_list):
        base = int(state.length[row])
        for j in range(n):
            if bool(criteria(state.tokens[row : row + 1, : base + j + 1], None).any()):
                n_list[row], stopped[row] = j + 1, True
                break
    device = n_new.device
    return torch.tensor(n_list, device=device), torch.tensor(stopped, device=device)


def stopping_criteria(cfg, tokenizer, user_criteria):
    """The user's stopping criteria plus stop_strings / max_time from the generation config (transformers')."""
    from transformers.generation.stopping_criteria import MaxTimeCriteria, StopStringCriteria, StoppingCriteriaList

    criteria = StoppingCriteriaList(user_criteria or [])
    if cfg.stop_strings:
        if tokenizer is None:
            raise ValueError("stop_strings needs the target's tokenizer: pass tokenizer=... to generate() "
                             "(as transformers requires)")
        criteria.append(StopStringCriteria(tokenizer=tokenizer, stop_strings=list(cfg.stop_strings)))
    if cfg.generation_config is not None and cfg.generation_config.max_time is not None:
        criteria.append(MaxTimeCriteria(max_time=cfg.generation_config.max_time))
    return criteria or None
