"""What each optimum-habana model class needs from the Gaudi runner, in one place: which cache mechanism it has,
which classes are refused and why, which compute something else than transformers, which take an additive mask,
how their KVCache modules are found, written at token_idx and put back."""
from __future__ import annotations

import sys

import torch

from ..runners.common import accepts


def cache_mechanism(model) -> str | None:
    """How a model can keep a static KV cache on Gaudi: "reuse_cache", "token_idx", or None (plain model)."""
    if hasattr(model, "allocate_kv_cache") and accepts(model, "reuse_cache"):
        return "reuse_cache"
    if accepts(model, "token_idx"):
        return "token_idx"
    return None


# optimum-habana 1.21.2 classes with a reuse_cache KV cache whose forward cannot take a block of L > 1 tokens at
# arbitrary columns (a verify, a catch-up): refused by name, with the place in upstream's code that stops it
REFUSED = {
    "GaudiGPTJForCausalLM": "its model forward flattens the attention mask to one row per sequence and adds a causal "
                            "bias that assumes the block fills the cache's last columns (modeling_gptj.py)",
    "GaudiGemma2ForCausalLM": "its allocate_kv_cache reads GaudiGemma2Attention.num_key_value_heads, which the "
                              "installed transformers no longer sets (optimum-habana's own reuse_cache generate() fails "
                              "the same way)",
    "GaudiStarcoder2ForCausalLM": "its allocate_kv_cache reads GaudiStarcoder2Attention.num_key_value_heads, which the "
                                  "installed transformers no longer sets (optimum-habana's own reuse_cache generate() "
                                  "fails the same way)",
    # optimum-habana's DeepSeek classes keep transformers' names (its own modeling files replace the classes)
    "DeepseekV2ForCausalLM": "its KV cache is MLA's 3D latent cache (batch, columns, rank), without the head "
                             "dimension the runner's column map addresses",
    "DeepseekV3ForCausalLM": "its KV cache is MLA's 3D latent cache (batch, columns, rank), without the head "
                             "dimension the runner's column map addresses",
}
def _falcon_refusal(config) -> str | None:
    if getattr(config, "alibi", False):
        return ("with ALiBi (config.alibi) cannot run in optimum-uag's static Gaudi runner: its model forward builds "
                "the ALiBi bias from a 2D attention mask (modeling_falcon.py build_alibi_tensor), and a block over a "
                "filled cache needs the runner's 4D mask")
    kv_heads = getattr(config, "num_kv_heads", None)
    if getattr(config, "new_decoder_architecture", False) and kv_heads not in (8, config.num_attention_heads):
        return (f"with new_decoder_architecture and num_kv_heads={kv_heads} cannot run in optimum-uag's static Gaudi "
                "runner: optimum-habana's attention broadcasts the keys to every head unless num_kv_heads is 8 "
                "(modeling_falcon.py _split_heads) and then writes them into a cache of num_kv_heads heads "
                "(optimum-habana's own reuse_cache generate() fails the same way)")
    return None


# classes refused for some configurations only: a function of the text config, the reason or None
CONFIG_REFUSALS = {"GaudiFalconForCausalLM": _falcon_refusal}
# classes whose model forward takes the past length as 0 for its mask (Mistral: always; Falcon: whenever token_idx
# is given), so our 4D mask over the whole cache fails the shape check of optimum-habana's
# _gaudi_prepare_4d_causal_attention_mask (expected: L + 0 columns). Their modeling module's reference to that helper
# is replaced (once, for the process) by one that reads the past length from a 4D mask's width: for a 2D mask, no
# mask, or a 4D mask of the expected width (every call upstream makes) it is the same call
PAST_FROM_MASK_WIDTH = {"GaudiMistralForCausalLM", "GaudiFalconForCausalLM"}
# classes whose own forward (optimum-habana 1.21.2) differs from transformers' model of the same weights: assisted
# generation reproduces the Gaudi class (what its own generate() gives), said once per call
UPSTREAM_DIFFERS = {
    "GaudiGemmaForCausalLM": "GaudiGemmaDecoderLayer.post_attn_pre_mlp normalizes the attention output before the "
                             "residual add and feeds the MLP the un-normalized sum (transformers: add, then "
                             "post_attention_layernorm, then the MLP)",
}
# classes whose model forward passes a 4D mask to the attention as it is: it must be additive (0 = attend)
ADDITIVE_MASK = {"GaudiGemmaForCausalLM"}


def forward_conventions(model) -> tuple[bool, bool, type]:
    """How the reuse_cache path calls this class's forward: (an additive 4D mask (0 = attend) where the class passes
    the mask to its attention as it is; cache_position where the class would otherwise derive it from the past's
    shapes (Mixtral, Phi); the type of the past sizes: torch.Size for Llama, as upstream's generate() passes them,
    else a tuple that also answers `.shape` (Gemma reads past[0].shape[-2]))."""
    name = type(model).__name__
    additive = name in ADDITIVE_MASK or (
        name == "GaudiMixtralForCausalLM" and getattr(model.config, "_attn_implementation", None) == "sdpa")
    llama = name.startswith("GaudiLlama")
    return additive, accepts(model, "cache_position") and not llama, torch.Size if llama else _Sizes


def _prepare_4d_mask_past_from_width(attention_mask, input_shape, inputs_embeds, past_key_values_length,
                                     sliding_window=None):
    """optimum-habana's _gaudi_prepare_4d_causal_attention_mask, the past length taken from a 4D mask's width."""
    from optimum.habana.transformers.modeling_attn_mask_utils import _gaudi_prepare_4d_causal_attention_mask

    if attention_mask is not None and attention_mask.dim() == 4:
        past_key_values_length = attention_mask.shape[-1] - input_shape[-1]
    return _gaudi_prepare_4d_causal_attention_mask(attention_mask, input_shape, inputs_embeds, past_key_values_length,
                                                   sliding_window=sliding_window)


def read_past_from_mask_width(model) -> None:
    """For a PAST_FROM_MASK_WIDTH class: its modeling module's mask helper reads the past length from a 4D mask's
    width (idempotent; kept for the process: it only differs where the original raises)."""
    if type(model).__name__ not in PAST_FROM_MASK_WIDTH:
        return
    module = sys.modules[type(model).__module__]
    if getattr(module, "_gaudi_prepare_4d_causal_attention_mask", None) is not None:
        module._gaudi_prepare_4d_causal_attention_mask = _prepare_4d_mask_past_from_width


def refusal(model, max_len: int) -> str | None:
    """Why optimum-uag's Gaudi runner cannot run this optimum-habana class for sequences of `max_len` tokens (one
    line naming it), or None."""
    name = type(model).__name__
    if name in REFUSED:
        return f"{name} cannot run in optimum-uag's static Gaudi runner: {REFUSED[name]}"
    config = text_config_of(model)
    reason = CONFIG_REFUSALS.get(name, lambda config: None)(config)
    if reason is not None:
        return f"{name} {reason}"
    window = getattr(config, "sliding_window", None)
    layer_types = getattr(config, "layer_types", None)
    sliding = "sliding_attention" in layer_types if layer_types else getattr(config, "use_sliding_window", True)
    if window and max_len > window and sliding:
        return (f"{name} has a sliding window ({window} tokens) that optimum-habana's {name} does not apply on its "
                f"reuse_cache path: a sequence of up to {max_len} tokens (prompt with its padding, max_new_tokens and the "
                "draft length) would attend to tokens the model never sees in transformers; keep it within the "
                "window")
    return None


_MISSING = object()


def _write_at_token_idx(prev, cur, dim, idx, inp_seq_len):
    """KVCache.update as optimum-habana's Llama does it with inp_seq_len -1: the block at columns idx - 1; the
    attention then reads the whole cache under the runner's mask."""
    prev.index_copy_(dim, idx - 1, cur)
    return prev


def _writes_blocks(module) -> bool:
    """True for a KVCache whose update already writes a block at token_idx (optimum-habana's Llama KVCache)."""
    update = getattr(type(module), "update", None)
    return getattr(update, "__module__", "").endswith("llama.modeling_llama")


class _Sizes(tuple):
    """A cache tensor's reported shape (batch, heads, past, head_dim): a tuple that also answers `.shape`, as some
    optimum-habana classes read `past_key_values[i][0].shape[-2]` and others `past_key_values[0][0][2]`."""

    @property
    def shape(self):
        return torch.Size(self)


def _kv_caches(model) -> list[tuple[torch.nn.Module, torch.nn.Module]]:
    """optimum-habana's per-layer KVCache modules (k_cache, v_cache), in layer order; under Intel Neural
    Compressor FP8 these are INC's PatchedKVCache wrappers, whose live module is `orig_mod` (see _live)."""
    pairs = []
    for module in model.modules():
        k, v = getattr(module, "k_cache", None), getattr(module, "v_cache", None)
        if k is not None and v is not None and hasattr(k, "get_shape") and hasattr(_live(k), "cache"):
            pairs.append((k, v))
    return pairs


def _live(cache: torch.nn.Module) -> torch.nn.Module:
    """The module whose `.cache` the forward reads: INC's PatchedKVCache keeps a stale `.cache` of its own and
    delegates to `orig_mod` (neural_compressor/torch/algorithms/fp8_quant/_quant_common/helper_modules.py)."""
    return getattr(cache, "orig_mod", cache)


def own_cache_bytes(model) -> int:
    """Bytes of the KV cache optimum-habana's own generate() allocated in the model's KVCache modules (reuse_cache),
    0 when it allocated none: what a target-only run of upstream holds, for comparison."""
    return sum(_live(c).cache.numel() * _live(c).cache.element_size() for pair in _kv_caches(model) for c in pair
               if getattr(_live(c), "cache", None) is not None)


def final_norm(model):
    """The module whose output is the last hidden state (after the final norm), or None."""
    base = getattr(model, "base_model", model)
    for name in ("norm", "final_layer_norm", "ln_f", "final_layernorm"):
        module = getattr(base, name, None)
        if isinstance(module, torch.nn.Module):
            return module
    return None


def decoder_layers(model):
    """The model's list of decoder layers (what hidden_states[l] is the input of), or None."""
    base = getattr(model, "base_model", model)
    for name in ("layers", "h", "blocks"):
        module = getattr(base, name, None)
        if isinstance(module, torch.nn.ModuleList):
            return module
    return None


def text_config_of(model):
    config = model.config
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def write_blocks_at_token_idx(cache) -> tuple | None:
    """optimum-habana's shared KVCache (and Gemma's, GPT-J's, ...) writes a block of L > 1 tokens at columns
    0..L-1 as a prefill (modeling_all_models.py KVCache.update); Llama's writes any block at token_idx when
    inp_seq_len is -1. Ours does the latter for every class while the runner is open (close() puts back what
    was there). Under INC FP8 the live module's `update` is INC's quantizing wrapper, which calls the
    PatchedKVCache's `org_update` (helper_modules.py): that is what gets replaced, so the block is still
    quantized on its way in. Returns what restore_updates() puts back, or None."""
    live = _live(cache)
    if _writes_blocks(live):
        return None
    holder, attr = (cache, "org_update") if cache is not live and hasattr(cache, "org_update") else (live, "update")
    saved = vars(holder).get(attr, _MISSING)
    if saved is _write_at_token_idx:  # (left by a runner that never closed: the class's own is underneath)
        saved = _MISSING
    setattr(holder, attr, _write_at_token_idx)
    return holder, attr, saved


def restore_updates(overridden: list) -> None:
    """Undo write_blocks_at_token_idx() for each (holder, attr, saved) it returned, newest first."""
    for holder, attr, saved in reversed(overridden):
        if saved is _MISSING:
            vars(holder).pop(attr, None)
        else:
            setattr(holder, attr, saved)
