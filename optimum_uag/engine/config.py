"""Resolve and validate the generation arguments of an assisted generation call."""
from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from transformers import GenerationConfig

from .policy import MAX_K as ADAPTIVE_MAX_K
from ..runners.common import text_config
from .tree import TreeShape

SCHEDULES = ("constant", "heuristic", "confidence")
DRAFT_POLICIES = ("adaptive", "fixed")
# A feature head's default draft tree (EAGLE-2), measured on SmolLM2 + its shipped head on this 2-core CPU against the
# prepacked target-only path, fixed trees, rows interleaved (2026-12-03; benchmarks/results/tree_sweep.json):
# held-out chat (6 requests, 2 repeats) (3,2,5) 1.30x tau 2.07, (3,3,6) 1.27x, (4,3,8) 1.23x, (5,3,10) 1.21x,
# (4,4,12) 1.19x tau 2.45; training-set requests (6, 3 repeats) (3,2,5) best again. A verify costs ~1.2 one-token
# forwards at 6 tokens and ~1.6 at 21 here: a wider tree's extra tau does not pay on this CPU
DEFAULT_TREE = TreeShape(depth=3, top_k=2, nodes=5)
# On a CPU the default tree is chosen per machine from these candidates (engine/loop.py `_device_tree`, on the curve of
# runners/cost.py `relative_curve`): the verify cost curve differs between CPUs. On an Intel Xeon (2 cores) a forward of 3 tokens costs 1.08-1.10 one-token
# forwards and one of 6 tokens 1.37-1.42 (MKL switches kernels at 4 rows; benchmarks/results/verify_cost_intel.json),
# and on 8 held-out chat requests at a fixed policy (1, 2, 2) ran 1.48x the fastest target-only path against 1.21x for
# (3, 2, 5) (tau 1.91 against 2.14; benchmarks/results/tree_sweep_intel.json); on the AMD EPYC of earlier sessions a
# 9-token verify cost ~1.17 and (3, 2, 5) was the best of the wider trees. Each candidate: (shape, its tau there,
# head steps a round: the catch-up and one per level below the first)
DEVICE_TREES = ((DEFAULT_TREE, 2.14, 3), (TreeShape(depth=1, top_k=2, nodes=2), 1.91, 1))
# (a call sizes its caches for DEFAULT_TREE before the choice: no candidate may be deeper or wider)
assert all(s.depth <= DEFAULT_TREE.depth and s.nodes <= DEFAULT_TREE.nodes for s, _, _ in DEVICE_TREES)
DEFAULT_NUM_ASSISTANT_TOKENS = 5
HEAD_NUM_ASSISTANT_TOKENS = 3  # a feature head's chain K where it drafts a chain (draft_tree=False, processors)
HEAD_LOOKUP_TOKENS = 8  # prompt lookup in front of a feature head unless prompt_lookup_num_tokens is given
# the default lookup branch beside a head's tree doubles after a round that accepted it whole, up to this many
# tokens, and falls back to HEAD_LOOKUP_TOKENS after one that did not (copying runs long in input-grounded answers):
# SmolLM2 + its head, grounded 2.13x vs 2.06x at 8, chat within its noise (benchmarks/results/lookup_growth.json)
HEAD_LOOKUP_MAX_TOKENS = 32
_HF_DEFAULT_MAX_LENGTH = 20  # transformers' model-agnostic max_length (its GenerationConfig's, or generate()'s)
# transformers' GenerationConfig default; a different value on the assistant's generation_config is the user's.
_HF_DEFAULT_NUM_ASSISTANT_TOKENS = 20
# Knobs whose effect this engine does not reproduce: refused unless left at their neutral value. (Logits
# processors such as repetition_penalty, min_new_tokens, bad_words_ids, sequence_bias, stop_strings, scores and
# num_return_sequences are supported: engine/processors.py.) transformers' assisted generation refuses these too.
_NEUTRAL = {
    "num_beams": 1, "diversity_penalty": 0.0, "encoder_no_repeat_ngram_size": 0, "force_words_ids": None,
    "constraints": None, "guidance_scale": None, "num_beam_groups": 1, "dola_layers": None, "penalty_alpha": None,
    "output_attentions": False, "output_hidden_states": False, "token_healing": False,
}


@dataclass
class AssistedConfig:
    """Everything the decoding loop needs to know about one call, validated."""

    max_new_tokens: int
    do_sample: bool
    temperature: float
    top_k: int
    top_p: float
    num_assistant_tokens: int
    schedule: str
    confidence_threshold: float
    max_assistant_tokens: int
    eos_token_ids: tuple[int, ...]
    pad_token_id: int
    prompt_lookup_num_tokens: int | None
    max_matching_ngram_size: int
    return_dict_in_generate: bool
    num_return_sequences: int = 1
    output_scores: bool = False
    output_logits: bool = False
    stop_strings: tuple = ()
    generation_config: GenerationConfig | None = None  # the merged config (for transformers' logits processors)
    tree: TreeShape | None = None  # a draft tree (engine/tree.py) where the drafter, runner and options allow
    tree_requested: bool = False  # the caller asked for it (draft_tree=True): a fallback to a chain is printed
    tree_default: bool = False  # no tree_depth / tree_top_k / tree_nodes given: a CPU chooses among DEVICE_TREES
    adaptive: bool = False  # draft length chosen per round from measured cost and acceptance (engine/policy.py)
    adaptive_requested: bool = False  # draft_policy="adaptive" given: a backend that cannot run it says so
    # a tree's verify nodes added for a prompt-lookup branch the head endorses (its first tokens are the head's own
    # first choices, drafters/feature.py BRANCH_ENDORSE): the n-gram continuation verified whole, beside every node of
    # the tree (eager backends; 0 off)
    tree_branch_nodes: int = 0
    # the longest that branch grows to (the default lookup: HEAD_LOOKUP_MAX_TOKENS), else tree_branch_nodes (>= it)
    tree_branch_max: int = 0
    lookup_is_default: bool = False  # prompt lookup in front of a feature head because none was asked for

    @property
    def max_draft_tokens(self) -> int:
        """The most candidates one round can propose: K (constant schedule), else the schedule's cap; prompt
        lookup (with a draft) may propose its own length. Static-shape backends verify this many every round."""
        k = self.num_assistant_tokens if self.schedule == "constant" else self.max_assistant_tokens
        k = max(k, ADAPTIVE_MAX_K) if self.adaptive else k
        nodes = self.tree.nodes + self.tree_branch_max if self.tree is not None else 0
        return max(k, self.prompt_lookup_num_tokens or 0, nodes)

    @property
    def max_accepted_tokens(self) -> int:
        """The most draft tokens one round can accept (a tree accepts one path; a lookup branch may be longer)."""
        k = self.num_assistant_tokens if self.schedule == "constant" else self.max_assistant_tokens
        k = max(k, ADAPTIVE_MAX_K) if self.adaptive else k
        tree = max(self.tree.depth, self.tree_branch_max) if self.tree is not None else 0
        return max(k, self.prompt_lookup_num_tokens or 0, tree)


def _check_neutral(values: dict) -> None:
    """Refuse generation options whose effect the engine does not reproduce."""
    for key, value in values.items():
        neutral = _NEUTRAL.get(key, value)
        if value is not None and value != neutral:
            if key in ("num_beams", "num_beam_groups", "diversity_penalty"):
                fix = "beam search is not supported with an assistant (nor by transformers): use num_beams=1"
            elif key == "penalty_alpha":
                fix = "contrastive search is not supported with an assistant (nor by transformers): drop penalty_alpha"
            else:
                fix = f"remove {key} or call generate() without an assistant"
            raise ValueError(f"{key}={value!r} is not supported by optimum-uag assisted generation; {fix}")


def resolve_config(model, assistant_model, generation_config: GenerationConfig | None, kwargs: dict,
                   ignore_eos: bool = False, prompt_length: int | None = None) -> AssistedConfig:
    """Merge model.generation_config, the given generation_config and kwargs; refuse what is unsupported.
    `prompt_length` (the input's columns): a max_length without max_new_tokens counts the prompt, as in
    transformers."""
    config = _merged_generation_config(model, generation_config)
    kwargs = dict(kwargs)
    max_assistant_tokens = kwargs.pop("max_assistant_tokens", 16)  # engine-only: cap of the heuristic schedule
    tree_args = {name: kwargs.pop(name, None) for name in ("draft_tree", "tree_depth", "tree_top_k", "tree_nodes")}
    policy = kwargs.pop("draft_policy", None)
    if policy not in (None, *DRAFT_POLICIES):
        raise ValueError(f"draft_policy must be one of {DRAFT_POLICIES} or None (adaptive unless num_assistant_tokens "
                         f"or a schedule is given), got {policy!r}")
    explicit = dict(kwargs)
    _check_neutral(explicit)  # before transformers' own validation, so the message names our fix
    max_new = explicit.get("max_new_tokens")
    if max_new is not None and (not isinstance(max_new, int) or max_new < 1):
        raise ValueError(f"max_new_tokens must be an integer >= 1, got {max_new!r}")
    unknown = config.update(**kwargs)
    gaudi = sorted(set(unknown) & {"lazy_mode", "hpu_graphs"})
    if gaudi:
        raise ValueError(f"{', '.join(gaudi)} need(s) an optimum-habana Gaudi model: call optimum_uag.gaudi.enable() "
                         "before loading the model (on a machine without Gaudi: optimum_uag.testing.hpu_emulator)")
    if unknown:
        raise TypeError(
            f"assisted_generate() got unexpected arguments {sorted(unknown)}; pass generation options such as "
            "max_new_tokens, do_sample, temperature, top_k, top_p, num_assistant_tokens"
        )
    _check_neutral({key: getattr(config, key, neutral) for key, neutral in _NEUTRAL.items()})

    max_new = config.max_new_tokens
    if max_new is None:
        max_new = explicit.get("max_new_tokens")
    transformers_5 = getattr(GenerationConfig, "_get_default_generation_params", None) is not None
    if max_new is None and prompt_length is not None:
        # transformers' max_length: prompt + new tokens (max_new_tokens wins where both are set), from the call, the
        # given generation_config or the model's own; neither: its model-agnostic default, which transformers'
        # generate() counts after the prompt (20 new tokens)
        max_length = explicit.get("max_length")
        if max_length is None:
            max_length = config.max_length
            if transformers_5:  # unset: None before transformers' global defaults (a set 20 means 20 in all)
                source = generation_config if generation_config is not None else model.generation_config
                unset = getattr(source, "max_length", None) is None and model.generation_config.max_length is None
            else:  # transformers 4: any 20 is the default
                unset = max_length in (None, _HF_DEFAULT_MAX_LENGTH)
            if unset:  # counted after the prompt, capped at the model's positions, as generate() does
                max_length = prompt_length + _HF_DEFAULT_MAX_LENGTH
                positions = getattr(text_config(model), "max_position_embeddings", None)
                if isinstance(positions, int) and positions > prompt_length:
                    max_length = min(max_length, positions)
        if max_length is not None:
            if not isinstance(max_length, int) or max_length - prompt_length < 1:
                raise ValueError(f"max_length={max_length!r} leaves no room for new tokens after the prompt "
                                 f"({prompt_length} tokens); raise max_length or pass max_new_tokens")
            max_new = max_length - prompt_length
    if max_new is None:
        raise ValueError("max_new_tokens is required (e.g. max_new_tokens=64), or max_length (prompt + new tokens)")
    if not isinstance(max_new, int) or max_new < 1:
        raise ValueError(f"max_new_tokens must be an integer >= 1, got {max_new!r}")

    lookup = config.prompt_lookup_num_tokens
    lookup_is_default = lookup is None and _is_feature_head(assistant_model)
    if lookup_is_default:
        lookup = HEAD_LOOKUP_TOKENS  # n-grams as a branch of the head's tree (or first, for a chain); 0 turns it off
    k = _num_assistant_tokens(explicit, generation_config, assistant_model, lookup)

    schedule = config.num_assistant_tokens_schedule or "constant"
    if schedule not in SCHEDULES:
        raise ValueError(f"num_assistant_tokens_schedule must be one of {SCHEDULES}, got {schedule!r}")
    threshold = float(config.assistant_confidence_threshold)
    if schedule == "confidence" and not 0.0 < threshold < 1.0:
        raise ValueError(f"assistant_confidence_threshold must be in (0, 1), got {threshold}")

    k_given = "num_assistant_tokens" in explicit or (
        generation_config is not None
        and generation_config.num_assistant_tokens not in (None, _HF_DEFAULT_NUM_ASSISTANT_TOKENS))
    tree, requested = _tree_shape(tree_args, k_given, assistant_model, schedule)
    # "constant" is transformers' default schedule: a fixed length is asked for with num_assistant_tokens (or
    # draft_policy="fixed")
    adaptive = policy == "adaptive" or (policy is None and not k_given and schedule == "constant")
    if adaptive and schedule != "constant":
        raise ValueError(f"draft_policy='adaptive' chooses the draft length itself; drop "
                         f"num_assistant_tokens_schedule={schedule!r} or pass draft_policy='fixed'")
    eos = None if ignore_eos else config.eos_token_id  # Gaudi runs (optimum-habana's ignore_eos): max_new_tokens
    eos_ids = () if eos is None else tuple(int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos]))
    pad = config.pad_token_id
    if pad is None:  # transformers pads with the (first) EOS
        first = config.eos_token_id
        first = first[0] if isinstance(first, (list, tuple)) and first else first
        pad = first if first is not None else 0
    temperature = float(config.temperature) if config.temperature is not None else 1.0
    if config.do_sample and temperature <= 0:
        raise ValueError(f"temperature must be > 0 when do_sample=True, got {temperature}; use do_sample=False for greedy")
    returns = int(config.num_return_sequences or 1)
    if returns > 1 and not config.do_sample:
        raise ValueError(f"num_return_sequences={returns} with greedy decoding would return {returns} identical rows "
                         "(transformers refuses it too); pass do_sample=True, or num_return_sequences=1")
    stop = config.stop_strings
    stop = (stop,) if isinstance(stop, str) else tuple(stop or ())
    top_p = float(config.top_p) if config.top_p is not None else 1.0
    if config.do_sample and not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    return AssistedConfig(
        max_new_tokens=max_new,
        do_sample=bool(config.do_sample),
        temperature=temperature,
        top_k=int(config.top_k or 0),
        top_p=top_p,
        num_assistant_tokens=k,
        schedule=schedule,
        confidence_threshold=threshold,
        max_assistant_tokens=max(k, int(max_assistant_tokens)),
        eos_token_ids=eos_ids,
        pad_token_id=int(pad),
        prompt_lookup_num_tokens=lookup,
        max_matching_ngram_size=int(config.max_matching_ngram_size or 2),
        return_dict_in_generate=bool(config.return_dict_in_generate),
        num_return_sequences=returns,
        output_scores=bool(config.output_scores),
        output_logits=bool(config.output_logits),
        stop_strings=stop,
        generation_config=config,
        tree=tree,
        tree_requested=requested,
        tree_default=tree is not None and all(tree_args[f"tree_{k}"] is None for k in ("depth", "top_k", "nodes")),
        tree_branch_nodes=int(lookup or 0) if tree is not None else 0,
        tree_branch_max=(max(HEAD_LOOKUP_MAX_TOKENS, int(lookup)) if lookup_is_default and lookup
                         else int(lookup or 0)) if tree is not None else 0,
        lookup_is_default=lookup_is_default,
        adaptive=adaptive,
        adaptive_requested=policy == "adaptive",
    )


def _tree_shape(args: dict, k_given: bool, assistant_model, schedule: str) -> tuple[TreeShape | None, bool]:
    """The draft tree of this call: draft_tree=None (auto) drafts a tree for a feature head unless the caller fixed
    num_assistant_tokens (argument or generation_config) or a schedule; True asks for one; False a chain. A tree
    shape given (tree_depth / tree_top_k / tree_nodes) asks for a tree as draft_tree=True does."""
    flag = args["draft_tree"]
    if flag not in (None, True, False):
        raise ValueError(f"draft_tree must be True, False or None (auto), got {flag!r}")
    shape = {k: args[f"tree_{k}"] for k in ("depth", "top_k", "nodes")}
    if flag is False:
        return None, False
    requested = flag is True or any(v is not None for v in shape.values())
    if not requested and (not _is_feature_head(assistant_model) or k_given or schedule != "constant"):
        return None, False
    default = DEFAULT_TREE
    return TreeShape(**{k: (v if v is not None else getattr(default, k)) for k, v in shape.items()}), requested


def _merged_generation_config(model, generation_config: GenerationConfig | None) -> GenerationConfig:
    """The call's generation config as transformers' generate() sees it. transformers 5 leaves unset fields None
    and fills them in generate(): from the model's generation_config, then its global defaults; done here too."""
    config = copy.deepcopy(generation_config if generation_config is not None else model.generation_config)
    defaults = getattr(GenerationConfig, "_get_default_generation_params", None)
    if defaults is None:  # transformers 4.x: the fields carry their defaults already
        return config
    layers = ([model.generation_config.to_dict()] if generation_config is not None else []) + [defaults()]
    for values in layers:
        for key, value in values.items():
            if value is not None and hasattr(config, key) and getattr(config, key) is None:
                setattr(config, key, value)
    return config


def _is_feature_head(assistant_model) -> bool:
    from .drafters.feature_head import FeatureHead

    return isinstance(assistant_model, FeatureHead)


def _num_assistant_tokens(explicit: dict, generation_config, assistant_model, lookup) -> int:
    """K: the call's argument, else a non-default one of the given generation_config, else the assistant's own,
    else the prompt-lookup length (lookup alone), else DEFAULT_NUM_ASSISTANT_TOKENS."""
    k = explicit.get("num_assistant_tokens")
    if k is None and generation_config is not None and generation_config.num_assistant_tokens != _HF_DEFAULT_NUM_ASSISTANT_TOKENS:
        k = generation_config.num_assistant_tokens
    if k is None and assistant_model is not None:
        own = getattr(getattr(assistant_model, "generation_config", None), "num_assistant_tokens",
                      _HF_DEFAULT_NUM_ASSISTANT_TOKENS)
        k = own if own != _HF_DEFAULT_NUM_ASSISTANT_TOKENS else None
    if k is None and _is_feature_head(assistant_model):
        k = HEAD_NUM_ASSISTANT_TOKENS
    if k is None:
        k = lookup if (assistant_model is None and lookup) else DEFAULT_NUM_ASSISTANT_TOKENS
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"num_assistant_tokens must be an integer >= 1, got {k!r}")
    return k


def validate_inputs(model, assistant_model, input_ids, attention_mask, cfg: AssistedConfig):
    """Check the prompt and the model pair; return (input_ids, attention_mask) on the target's device."""
    if not isinstance(input_ids, torch.Tensor):
        raise TypeError(f"input_ids must be a torch.Tensor of token ids, got {type(input_ids).__name__}")
    if input_ids.dim() == 1:
        input_ids = input_ids[None]
    if input_ids.dim() != 2 or input_ids.numel() == 0 or input_ids.shape[1] == 0:
        raise ValueError(f"input_ids must be a non-empty (batch, length) tensor, got shape {tuple(input_ids.shape)}")
    if input_ids.dtype.is_floating_point or input_ids.dtype.is_complex or input_ids.dtype == torch.bool:
        raise ValueError(f"input_ids must hold integer token ids (torch.long), got dtype {input_ids.dtype}; pass the "
                         "tokenizer's input_ids (return_tensors='pt') or convert with input_ids.long()")
    device = model.device
    input_ids = input_ids.to(device)
    if attention_mask is None:
        if input_ids.shape[0] > 1 and (input_ids == cfg.pad_token_id).any():
            raise ValueError(
                "the batch contains pad_token_id but no attention_mask was given; pass the tokenizer's "
                "attention_mask (left padding) so padded positions are ignored"
            )
        attention_mask = torch.ones_like(input_ids)
    attention_mask = attention_mask.to(device)
    if attention_mask.shape != input_ids.shape:
        raise ValueError(f"attention_mask shape {tuple(attention_mask.shape)} != input_ids shape {tuple(input_ids.shape)}")
    if (attention_mask.sum(1) == 0).any():
        raise ValueError("a prompt in the batch is empty (its attention_mask is all zeros); remove it")
    # Left padding only: once a row starts, it must stay unmasked.
    if (attention_mask[:, 1:] < attention_mask[:, :-1]).any():
        raise ValueError("prompts must be left-padded for generation; set tokenizer.padding_side = 'left'")
    limit = getattr(model.config, "max_position_embeddings", None)
    # optimum-habana's RoPE classes extend their tables to the request (update_sincos_cache, as its generate() does
    # past the 8192 its multi-card loader caps Llama's max_position_embeddings to): no limit there
    extends = hasattr(model, "update_sincos_cache")
    if limit is not None and limit > 0 and not extends and input_ids.shape[1] + cfg.max_new_tokens > limit:
        raise ValueError(
            f"prompt length {input_ids.shape[1]} + max_new_tokens {cfg.max_new_tokens} exceeds the model's "
            f"max_position_embeddings={limit}; shorten the prompt or lower max_new_tokens"
        )
    _check_token_range(input_ids, attention_mask, model, "the model")
    _refuse_dynamic_activation_quant(model)
    if assistant_model is not None:
        if assistant_model.device != device:
            raise ValueError(
                f"assistant_model is on {assistant_model.device} but the model is on {device}; "
                f"move it with assistant_model.to('{device}')"
            )
    return input_ids, attention_mask


def embedding_rows(model) -> int | None:
    """How many token ids the model's input embedding accepts (None when it has no embedding table)."""
    get = getattr(model, "get_input_embeddings", None)
    try:
        embed = get() if get is not None else None
    except (NotImplementedError, AttributeError):
        embed = None
    rows = getattr(embed, "num_embeddings", None)
    if rows is None:
        config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        rows = getattr(config, "vocab_size", None)
    return rows


def _check_token_range(input_ids: torch.Tensor, attention_mask: torch.Tensor, model, who: str) -> None:
    """Ids outside [0, vocab) would end in an IndexError deep in torch's embedding (or garbage on an HPU)."""
    rows = embedding_rows(model)
    if rows is None:
        return
    ids = input_ids[attention_mask.bool()]
    bad = ids[(ids < 0) | (ids >= rows)]
    if bad.numel():
        raise ValueError(f"input_ids holds token id {int(bad[0])}, outside {who}'s vocabulary [0, {rows}); encode the "
                         "prompt with this model's own tokenizer")


def check_draft_token_range(input_ids: torch.Tensor, attention_mask: torch.Tensor, assistant_model) -> None:
    """A draft that shares the target's tokenizer reads the prompt's ids as they are: they must fit its table."""
    _check_token_range(input_ids, attention_mask, assistant_model, "the assistant model")


def _refuse_dynamic_activation_quant(model) -> None:
    """Dynamic int8 computes activation scales over the whole forward input, so a token's logits depend on which
    other tokens share the forward: no speculative method (nor batching) can reproduce the target's own output."""
    dynamic = getattr(torch.ao.nn.quantized, "dynamic", None)
    kinds = tuple(k for k in (getattr(dynamic, "Linear", None),) if k is not None)
    from ..registry import model_state

    if model_state(model).get("quant") == "dynamic-int8" or (
            kinds and any(isinstance(m, kinds) for m in model.modules())):
        raise ValueError(
            "the target uses dynamic int8 quantization (activation scales computed per forward), so its output "
            "depends on how many tokens one forward sees and cannot be reproduced exactly; quantize the target "
            "weight-only (RTN) or with static FP8 scales (habana_configs/quantization_config), or use dynamic "
            "int8 for the assistant only"
        )
