"""Draft stages behind one `Drafter` interface: a draft model on the target's tokenizer, a draft model with its own
tokenizer (UAG), a feature head over the target's hidden states (EAGLE), prompt lookup, and lookup + a draft."""
from __future__ import annotations

import os

import torch

from .base import Drafter, DraftStats, draft_loop, no_proposal, pad_proposal
from .combined import LookupThenDraft
from .feature import FeatureDrafter
from .feature_head import FeatureHead, is_feature_head, load_feature_head
from .lookup import PromptLookupDrafter
from .model import ModelDrafter
from .universal import UniversalDrafter

__all__ = ["Drafter", "DraftStats", "FeatureDrafter", "FeatureHead", "LookupThenDraft", "ModelDrafter",
           "PromptLookupDrafter", "UniversalDrafter", "build_drafter", "draft_loop", "is_feature_head",
           "load_feature_head", "no_proposal", "pad_proposal", "resolve_assistant"]


def resolve_assistant(assistant_model):
    """A head directory given as a path becomes a FeatureHead; anything else is returned as is."""
    if isinstance(assistant_model, (str, os.PathLike)):
        if is_feature_head(assistant_model):
            return load_feature_head(assistant_model)
        raise ValueError(f"assistant_model={str(assistant_model)!r} is a path but not a feature-head directory; load a "
                         "draft model with AutoModelForCausalLM.from_pretrained() and pass the model")
    return assistant_model


def build_drafter(model, assistant_model, tokenizer, assistant_tokenizer, state, capacity, cfg, sampler,
                  runner_factory, processors=None, vocab_size: int | None = None) -> Drafter:
    """Pick the draft (+translate) stage for this model pair; with prompt_lookup_num_tokens and a draft, lookup
    first and the draft where no n-gram matches."""
    from ..config import check_draft_token_range
    from ..sampling import output_vocab_size
    from .translation import same_vocabulary

    vocab_size = vocab_size or output_vocab_size(model)
    threshold = cfg.confidence_threshold if cfg.schedule == "confidence" else None
    if assistant_model is None:
        if not cfg.prompt_lookup_num_tokens:
            raise ValueError("pass assistant_model=... (a draft model or a feature head) or "
                             "prompt_lookup_num_tokens=... (n-gram drafting)")
        return PromptLookupDrafter(cfg.max_matching_ngram_size)
    if isinstance(assistant_model, FeatureHead):
        width = cfg.max_accepted_tokens + 1  # new true pairs per round, at most
        drafter = FeatureDrafter(assistant_model, model, state, capacity, vocab_size, sampler, threshold, width,
                                 processors, tree=cfg.tree, branch_nodes=cfg.tree_branch_nodes,
                                 branch_max=cfg.tree_branch_max)
    elif tokenizer is None and assistant_tokenizer is not None:
        raise ValueError(
            "tokenizer is missing: pass both tokenizer= (the target's) and assistant_tokenizer= (the assistant's), "
            "or neither when the two models share one tokenizer"
        )
    elif assistant_tokenizer is None or same_vocabulary(tokenizer, assistant_tokenizer):
        if assistant_tokenizer is None and assistant_model.config.vocab_size != model.config.vocab_size:
            raise ValueError(
                f"the assistant's vocabulary ({assistant_model.config.vocab_size} tokens) differs from the model's "
                f"({model.config.vocab_size}); pass tokenizer= and assistant_tokenizer= (assistant_tokenizer is "
                "missing) to use Universal Assisted Generation across tokenizers"
            )
        prompt = state.tokens[:, : state.prompt_len]
        columns = torch.arange(state.prompt_len, device=prompt.device)
        check_draft_token_range(prompt, (columns >= state.pad[:, None]).long(), assistant_model)
        drafter = ModelDrafter(assistant_model, state, capacity, vocab_size, sampler, threshold, runner_factory,
                               processors)
    else:
        drafter = UniversalDrafter(assistant_model, tokenizer, assistant_tokenizer, state, capacity, vocab_size,
                                   sampler, threshold, cfg, runner_factory)
    if cfg.prompt_lookup_num_tokens and not isinstance(drafter, ModelDrafter):
        # (a same-tokenizer draft model trusts its cache of its own drafted tokens: lookup rounds would stale it)
        datastore = getattr(assistant_model, "datastore", None) if cfg.tree is not None else None
        return LookupThenDraft(PromptLookupDrafter(cfg.max_matching_ngram_size), drafter,
                               cfg.prompt_lookup_num_tokens, datastore=datastore)
    return drafter
