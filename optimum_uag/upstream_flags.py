"""optimum-habana run_generation.py flags that optimum-uag accepts without acting on them, or refuses with the
alternative, so that an upstream command line never stops on an unknown flag nor with a stack trace."""
from __future__ import annotations

import argparse

# flag: (argparse kwargs, why it changes nothing here)
NO_OPS = {
    "flash_attention_causal_mask": ({}, "optimum-uag always passes its own mask (a verify block is not a lone prompt)"),
    "trim_logits": ({}, "the engine keeps only the logits it needs"),
    "bucket_internal": ({}, "optimum-habana's models slice the cache (cache_idx) for one-token queries only; a "
                            "verify block attends over the whole cache, whose width is the request's (see --bucket_size)"),
    "show_graphs_count": ({}, "results.json always reports graph_captures"),
    "verbose_workers": ({}, "only rank 0 reports"),
    "reduce_recompile": ({}, "prompts are bucketed already"),
    "sdp_on_bf16": ({}, "no effect here"),
    "use_flex_attention": ({}, "optimum-uag passes explicit masks"),
    "attn_batch_split": (dict(type=int, default=1), "attention is not split"),
    "decode_attn_batch_split": (dict(type=int, default=1), "attention is not split"),
    "profiling_warmup_steps": (dict(type=int, default=0), "no built-in profiler; wrap the run in torch.profiler"),
    "profiling_steps": (dict(type=int, default=0), "no built-in profiler; wrap the run in torch.profiler"),
    "profiling_record_shapes": ({}, "no built-in profiler"),
    "profile_whole_sequences": ({}, "no built-in profiler"),
    "run_partial_dataset": ({}, "--dataset_max_samples selects the rows"),
    "csp": (dict(type=str, default=None), "upstream's script declares it and reads it nowhere"),
}

def true_or_false(value: str) -> bool:
    """A flag value as upstream's SetTrueOrFalseOrNone reads it (utils.py): true/1/t/y/yes or false/0/f/n/no."""
    lowered = str(value).strip().lower()
    if lowered in ("true", "1", "t", "y", "yes"):
        return True
    if lowered in ("false", "0", "f", "n", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected True or False, got {value!r}")


# flag: (argparse kwargs, what it does): passed to optimum-uag's target forwards as to the target-only baseline
APPLIED = {
    "limit_hpu_graphs": ({}, "Gaudi: HPU graphs skip the prompt's forward (no capture per prompt shape), for "
                             "optimum-uag's models as for the target-only baseline"),
    "clear_hpu_graphs_cache": ({}, "Gaudi, with --limit_hpu_graphs: HPU graphs are dropped at the end of each "
                                   "generate() call"),
    "attn_softmax_bf16": ({}, "Gaudi: attention softmax in bf16 (eager attention), for optimum-uag's target forwards "
                              "as for the target-only baseline"),
    "flash_attention_fast_softmax": (dict(nargs="?", const=True, default=None, type=true_or_false),
                                     "Gaudi: FusedSDPA's fast softmax for the prompt's forwards, as upstream's Llama "
                                     "(never a verify block: upstream's target-only decode never runs it)"),
}

# flag: (argparse kwargs, the value that means "off", what to do instead)
REFUSED = {
    "num_beams": (dict(type=int, default=1), 1, "beam search does not combine with an assistant (nor in transformers); "
                  "drop --num_beams"),
    "penalty_alpha": (dict(type=float, default=None), None, "contrastive search does not combine with an assistant; "
                      "drop --penalty_alpha"),
    "force_words": (dict(type=str, nargs="+", default=None), None, "constrained beam search needs num_beams > 1; drop "
                    "--force_words"),
    "mlcommons_dataset": (dict(default=None), None, "use --dataset_name with a local copy (JSON/CSV) and --column_name"),
    "peft_model": (dict(default=None), None, "merge the adapter first (peft's merge_and_unload, save_pretrained) and "
                   "pass that directory as --model_name_or_path"),
    "simulate_dyn_prompt": (dict(type=int, nargs="*", default=None), None, "pass real prompts (--prompt_file)"),
    "book_source": ({}, False, "pass real prompts (--prompt_file)"),
    "input_embeds": ({}, False, "pass token prompts"),
    "save_quantized_model_with_inc": ({}, False, "quantize with QUANT_CONFIG at load time"),
    "saved_model_path": (dict(default="inc_quantized_model"), "inc_quantized_model", "quantize with QUANT_CONFIG"),
    "local_quantized_inc_model_path": (dict(default=None), None, "pass the quantized directory as "
                                       "--model_name_or_path with --load_quantized_model_with_inc"),
    "pt2e_save": ({}, False, "quantize with QUANT_CONFIG (Intel Neural Compressor)"),
    "pt2e_path": (dict(default=None), None, "quantize with QUANT_CONFIG (Intel Neural Compressor)"),
    "pt2e_quant_dtype": (dict(default="fp8_143"), "fp8_143", "quantize with QUANT_CONFIG (Intel Neural Compressor)"),
    "load_quantized_model_with_autogptq": ({}, False, "use an FP8 (INC) or RTN model via QUANT_CONFIG"),
    "load_quantized_model_with_autoawq": ({}, False, "use an FP8 (INC) or RTN model via QUANT_CONFIG"),
    "quantize_with_bnb": ({}, False, "use an RTN model via QUANT_CONFIG (habana_configs/quantization_config)"),
    "disk_offload": ({}, False, "load the model on a machine with enough memory, or shard it: deepspeed --num_gpus N"),
    "parallel_strategy": (dict(default="none", choices=["none", "tp", "ep"]), "none",
                          "multi-card runs go through the DeepSpeed launcher: deepspeed --num_gpus N ..."),
    "const_serialization_path": (dict(default=""), "", "no torch.compile here (static caches + HPU graphs)"),
    "regional_compile": ({}, False, "no torch.compile here (static caches + HPU graphs)"),
    "force_static_compile": ({}, False, "no torch.compile here (static caches + HPU graphs)"),
    "cache_size_limit": (dict(type=int, default=None), None, "no torch.compile here (static caches + HPU graphs)"),
    "dynamo_specialize_float": ({}, False, "no torch.compile here (static caches + HPU graphs)"),
    "dynamo_allow_unspec_int_on_nn_module": ({}, False, "no torch.compile here (static caches + HPU graphs)"),
}


def add_upstream_flags(parser: argparse.ArgumentParser) -> None:
    """Declare the no-op, applied and refused flags (store_true unless their kwargs say otherwise)."""
    for flag, (kwargs, why) in NO_OPS.items():
        parser.add_argument(f"--{flag}", **({"action": "store_true"} if not kwargs else kwargs), help=f"no-op: {why}")
    for flag, (kwargs, what) in APPLIED.items():
        parser.add_argument(f"--{flag}", **({"action": "store_true"} if not kwargs else kwargs), help=what)
    for flag, (kwargs, _, fix) in REFUSED.items():
        parser.add_argument(f"--{flag}", **({"action": "store_true"} if not kwargs else kwargs),
                            help=f"refused: {fix}")


def refused(args) -> str | None:
    """The message for the first refused flag that was set, or None."""
    for flag, (_, off, fix) in REFUSED.items():
        if getattr(args, flag) != off:
            return f"--{flag} is not supported by optimum-uag: {fix}"
    return None


def ignored(args) -> list[str]:
    """The no-op flags that were set."""
    defaults = {flag: (kwargs.get("default", False) if kwargs else False) for flag, (kwargs, _) in NO_OPS.items()}
    return [f"--{flag}" for flag in NO_OPS if getattr(args, flag) != defaults[flag]]
