"""Tiny random models of every causal-LM architecture transformers registers (tests and the coverage table).

`tiny_model(model_type, vocab_size, seed)` builds a 2-layer, 32-wide model from the architecture's own config
class (float64 by default, so that argmax ties cannot flip between decoding paths). Architectures transformers
cannot build that way, or that are not decoder-only causal LMs, raise `Unbuildable` with the reason.
"""
from __future__ import annotations

import inspect

import torch
from transformers import AutoConfig
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

# The same small size for every config, under each of the names configs use for it (only those a config's
# __init__ accepts are passed).
_TINY = dict(
    hidden_size=32, n_embd=32, d_model=32, embed_dim=32, dim=32, n_embed=32, hidden_dim=32,
    intermediate_size=64, n_inner=64, ffn_dim=64, inner_dim=64, d_ff=64, ffn_hidden_size=64,
    num_hidden_layers=2, n_layer=2, num_layers=2, n_layers=2, decoder_layers=2,
    num_attention_heads=4, n_head=4, num_heads=4, n_heads=4, decoder_attention_heads=4,
    num_key_value_heads=2, multi_query_group_num=2, head_dim=8, kv_channels=8,
    max_position_embeddings=256, n_positions=256, n_ctx=256, max_seq_len=256, seq_length=256,
    moe_intermediate_size=32, num_experts=4, num_local_experts=4, n_routed_experts=4, num_experts_per_tok=2,
    n_shared_experts=1, first_k_dense_replace=1, shared_expert_intermediate_size=32, rotary_dim=4,
    partial_rotary_factor=0.5, decoder_ffn_dim=64, attention_window_size=None,
    # a window shorter than the test sequences, so that sliding-window masks are really exercised
    sliding_window=6, sliding_window_pattern=2,
    use_cache=True, tie_word_embeddings=False,
)
# Per-architecture sizes that the generic ones above do not satisfy.
_PER_TYPE = {
    "deepseek_v2": dict(qk_rope_head_dim=4, qk_nope_head_dim=4, v_head_dim=8, kv_lora_rank=16, q_lora_rank=None),
    "deepseek_v3": dict(qk_rope_head_dim=4, qk_nope_head_dim=4, v_head_dim=8, kv_lora_rank=16, q_lora_rank=16),
    "gpt_neo": dict(attention_types=[[["global", "local"], 1]], window_size=6),
    "bamba": dict(mamba_n_heads=4, mamba_d_head=16),
    "granitemoehybrid": dict(mamba_n_heads=4, mamba_d_head=16),
    "mamba2": dict(num_heads=8, head_dim=8),
    "falcon": dict(num_kv_heads=2, new_decoder_architecture=True),
    "moshi": dict(sliding_window=3000),
    "falcon-rw": dict(num_attention_heads=4, multi_query=False),
}
# Variants of one architecture whose code paths differ (model_type, overrides).
VARIANTS = {
    "falcon-alibi": ("falcon", dict(alibi=True, new_decoder_architecture=False, multi_query=True)),
    "falcon-rw": ("falcon", dict(new_decoder_architecture=False, multi_query=False, parallel_attn=False, bias=True)),
    "mistral-nowindow": ("mistral", dict(sliding_window=None)),
}
MAX_PARAMETERS = 150_000_000  # tiny text sizes give < 1M; a vision tower at its own size (GIT: 86M) still builds
_SPECIAL_IDS = ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id")


class Unbuildable(Exception):
    """This architecture cannot be built tiny as a standalone decoder-only causal LM (the message says why)."""


def causal_lm_types() -> list[str]:
    """Every model_type in transformers' MODEL_FOR_CAUSAL_LM_MAPPING, sorted, plus the VARIANTS."""
    return sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES) + sorted(VARIANTS)


def tiny_config(model_type: str, vocab_size: int, **overrides):
    """A tiny config of `model_type` (its own defaults, shrunk to 2 layers x 32 wide)."""
    if model_type in VARIANTS:
        model_type, variant = VARIANTS[model_type]
        overrides = {**variant, **overrides}
    overrides = {**_PER_TYPE.get(model_type, {}), **overrides}
    try:
        cls = type(AutoConfig.for_model(model_type))
    except Exception as err:  # noqa: BLE001 - transformers raises many kinds here
        raise Unbuildable(f"AutoConfig.for_model failed: {type(err).__name__}: {err}") from None
    params = inspect.signature(cls.__init__).parameters
    kwargs = {k: v for k, v in {**_TINY, "vocab_size": vocab_size, **overrides}.items() if k in params}
    if "text_config" in params and "hidden_size" not in params:
        raise Unbuildable("a multimodal wrapper config (text_config): its causal LM is a composite model")
    for name in _SPECIAL_IDS:  # keep special ids inside the vocabulary
        if name in params and name not in overrides:
            kwargs[name] = min(vocab_size - 1, {"pad_token_id": 0, "bos_token_id": 1}.get(name, 2))
    try:
        config = cls(**kwargs)
    except Exception as err:  # noqa: BLE001
        raise Unbuildable(f"{cls.__name__}(...) failed: {type(err).__name__}: {err}") from None
    if getattr(config, "is_encoder_decoder", False):
        raise Unbuildable("encoder-decoder config")
    if not hasattr(config, "vocab_size"):
        raise Unbuildable("no vocab_size: a multimodal composite config")
    if hasattr(config, "is_decoder"):
        config.is_decoder = True  # BERT-style models are causal only as decoders
    return config


def tiny_model(model_type: str, vocab_size: int, seed: int = 0, dtype=torch.float64, **overrides):
    """A tiny random causal LM of `model_type`, in eval mode."""
    from transformers import AutoModelForCausalLM

    config = tiny_config(model_type, vocab_size, **overrides)
    try:  # count first, on the meta device: a config whose sub-configs keep their own sizes is not tiny
        with torch.device("meta"):
            size = sum(p.numel() for p in AutoModelForCausalLM.from_config(config).parameters())
    except Exception:  # noqa: BLE001 - the real build below reports the reason
        size = 0
    if size > MAX_PARAMETERS:
        raise Unbuildable(f"{size / 1e6:.0f}M parameters at the tiny sizes (its sub-configs keep their own): not "
                          "tiny")
    torch.manual_seed(seed)
    try:
        model = AutoModelForCausalLM.from_config(config, torch_dtype=dtype)
    except Exception as err:  # noqa: BLE001
        raise Unbuildable(f"from_config failed: {type(err).__name__}: {str(err)[:200]}") from None
    model.eval()
    gen = model.generation_config
    if gen is None:
        raise Unbuildable("no generation_config: transformers does not generate with this (deprecated) model")
    gen.pad_token_id = config.pad_token_id if getattr(config, "pad_token_id", None) is not None else 0
    gen.eos_token_id = None  # random models: every call generates exactly max_new_tokens
    return model
