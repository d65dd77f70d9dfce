"""optimum-habana's generate() knobs (kwargs and GaudiGenerationConfig fields), read once per call."""
from __future__ import annotations

import warnings
from dataclasses import dataclass

_WARNED: list = []  # bucket_internal's warning, once per process

# generate() keyword arguments of GaudiGenerationMixin that are not generation options.
_CALL_KWARGS = ("lazy_mode", "hpu_graphs", "iteration_times", "profiler", "profiling_warmup_steps", "profiling_steps",
                "profiling_record_shapes", "profiling_activities")
# GaudiGenerationConfig fields; they describe how the target runs, not what it generates.
_CONFIG_FIELDS = ("static_shapes", "reuse_cache", "bucket_size", "bucket_internal", "ignore_eos", "trim_logits",
                  "attn_softmax_bf16", "limit_hpu_graphs", "clear_hpu_graphs_cache", "use_flash_attention",
                  "flash_attention_recompute", "flash_attention_causal_mask", "flash_attention_fast_softmax",
                  "reduce_recompile", "use_fused_rope", "use_fused_rms_norm", "valid_sequence_lengths",
                  "kv_cache_fp8", "use_flex_attention")


@dataclass
class GaudiOptions:
    """How the models run on Gaudi. Caches are always static (token_idx); these say what else applies."""

    lazy_mode: bool = False  # upstream's generate(lazy_mode=False); its run_generation.py passes True
    hpu_graphs: bool = False
    ignore_eos: bool = False
    use_flash_attention: bool = False  # FusedSDPA with our explicit mask (causal-mask mode does not apply)
    flash_attention_recompute: bool = False
    attn_softmax_bf16: bool = False  # eager attention's softmax in bf16 (modeling_llama: attn_softmax_bf16)
    flash_attention_fast_softmax: bool = False  # FusedSDPA's fast softmax mode
    iteration_times: list | None = None  # upstream's generate() fills it: seconds per generated token (steps.RoundTimes)
    profiler: object = None  # upstream's HabanaProfile: start(), step() per generated token, stop()
    bucket_size: int = 0  # the target's cache width is a multiple of it (else of cache.MARGIN)
    limit_hpu_graphs: bool = False  # the prompt's forward runs outside HPU graphs (upstream: first token bypassed)
    clear_hpu_graphs_cache: bool = False  # with limit_hpu_graphs, bucket_internal and no reuse_cache (as upstream):
    # graphs dropped at the end of the call


def pop_gaudi_options(model, kwargs: dict, generation_config=None) -> GaudiOptions | None:
    """Remove optimum-habana's knobs from kwargs; return GaudiOptions for a Gaudi model, else None.

    Refuses knobs that would make a Gaudi-only promise on a model that does not run on Gaudi."""
    from .device import is_gaudi_model

    call = {key: kwargs.pop(key) for key in _CALL_KWARGS if key in kwargs}
    fields = {key: kwargs.pop(key) for key in _CONFIG_FIELDS if key in kwargs}

    sources = (fields, generation_config, getattr(model, "generation_config", None))

    def raw(key: str):  # a kwarg, else the given generation_config, else the model's
        for source in sources:
            value = source.get(key) if isinstance(source, dict) else getattr(source, key, None)
            if value is not None:
                return value
        return None

    def field(key: str) -> bool:
        return bool(raw(key))

    if not is_gaudi_model(model):
        wanted = [key for key in ("lazy_mode", "hpu_graphs") if call.get(key)]
        if wanted:
            raise ValueError(
                f"{', '.join(wanted)}=True needs an optimum-habana Gaudi model (call optimum_uag.gaudi.enable() "
                "before loading the model; on a machine without Gaudi use optimum_uag.testing.hpu_emulator)"
            )
        return None
    if field("bucket_internal") and not _WARNED:
        _WARNED.append(True)
        warnings.warn("bucket_internal does not apply to optimum-uag's loop: optimum-habana's models slice the cache "
                      "(cache_idx) for one-token queries only, and a verify block is K+1 tokens; the caches are "
                      "sized to the request instead (widths a multiple of bucket_size)", stacklevel=3)
    if call.get("hpu_graphs") and not call.get("lazy_mode"):  # upstream's generate() refuses it the same way
        raise ValueError("hpu_graphs=True needs lazy_mode=True (HPU graphs capture lazy-mode graphs), as in "
                         "optimum-habana's generate(); pass lazy_mode=True, or hpu_graphs=False")
    return GaudiOptions(
        lazy_mode=bool(call.get("lazy_mode", False)),
        hpu_graphs=bool(call.get("hpu_graphs", False)),
        ignore_eos=field("ignore_eos"),
        use_flash_attention=field("use_flash_attention"),
        flash_attention_recompute=field("flash_attention_recompute"),
        attn_softmax_bf16=field("attn_softmax_bf16"),
        flash_attention_fast_softmax=field("flash_attention_fast_softmax"),
        iteration_times=call.get("iteration_times"),
        profiler=call.get("profiler"),
        bucket_size=_bucket_size(raw("bucket_size")),
        limit_hpu_graphs=field("limit_hpu_graphs"),
        # upstream clears its graphs at the end only under this whole condition (generation/utils.py, _sample)
        clear_hpu_graphs_cache=(field("clear_hpu_graphs_cache") and field("limit_hpu_graphs")
                                and not field("reuse_cache") and field("bucket_internal")),
    )


def _bucket_size(value) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"bucket_size must be an int (a cache width multiple; -1 or 0 for none), not {value!r}")
    return max(0, value)
