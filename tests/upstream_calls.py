"""optimum-habana's examples/text-generation/run_generation.py call sequence (v1.21), in its order, for a test.

Run through the launcher (`python -m optimum_uag.gaudi.launch tests/upstream_calls.py ...`, under the emulator via
tests/emulated_launch.py): setup_env (env vars, version checks, adapt_transformers_to_gaudi), setup_device, the
models loaded with AutoModelForCausalLM, evaluated, both wrapped in HPU graphs, a left-padding tokenizer,
setup_generation_config's fields, a warm-up generate() and a measured one with upstream's keyword arguments
(lazy_mode, hpu_graphs, ignore_eos (upstream's default True; --no-ignore_eos), iteration_times, profiler),
iteration_times[0] read as the first-token time; --max_input_tokens (prompts padded to that length, truncated,
valid_sequence_lengths set) and the flash-attention flags as upstream sets them.
Under a launcher (WORLD_SIZE > 0) the models come from upstream's setup_distributed_model instead: DeepSpeed's
process group, the target built on the meta device where upstream does so (write_checkpoints_json) or on the CPU,
init_inference with AutoTP and upstream's injection policy, ScopedLinearAllReduce, and the assistant loaded and left
where from_pretrained put it (upstream never moves it). What the emulated machine cannot do: hccl (gloo instead),
HPU graphs through DeepSpeed's enable_cuda_graph (DeepSpeed's CPU accelerator has none: off), bf16 (--dtype, fp32 by
default: the comparison below is exact in fp32).
Then (not upstream) the target-only reference with optimum-habana's own generate(), and a JSON report.
"""
import argparse
import copy
import json
import os

import torch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model_name_or_path", required=True)
    parser.add_argument("--assistant_model", required=True)
    parser.add_argument("--batch_size", type=int, default=2)
    parser.add_argument("--max_new_tokens", type=int, default=24)
    parser.add_argument("--use_hpu_graphs", action="store_true")
    parser.add_argument("--limit_hpu_graphs", action="store_true")
    parser.add_argument("--bucket_internal", action="store_true")
    parser.add_argument("--bucket_size", type=int, default=-1)
    parser.add_argument("--reuse_cache", action="store_true")
    parser.add_argument("--max_input_tokens", type=int, default=0,
                        help="prompts padded (left) and truncated to this length, as upstream's tokenization")
    parser.add_argument("--use_flash_attention", action="store_true")
    parser.add_argument("--flash_attention_causal_mask", action="store_true")
    parser.add_argument("--flash_attention_fast_softmax", nargs="?", const=None, default=None)
    parser.add_argument("--ignore_eos", default=True, action=argparse.BooleanOptionalAction)  # upstream's default
    parser.add_argument("--dataset_path", action="store_true",
                        help="generate() without assistant_model, as upstream's --dataset_name path calls it")
    parser.add_argument("--local_rank", type=int, default=0)  # (DeepSpeed's launcher passes it; upstream's takes it)
    parser.add_argument("--dtype", default="float32", help="the models' dtype (upstream: bf16 under DeepSpeed)")
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    # utils.setup_distributed
    args.local_rank = int(os.getenv("LOCAL_RANK", "0"))
    args.world_size = int(os.getenv("WORLD_SIZE", "0"))
    dtype = getattr(torch, args.dtype)
    # run_generation.py, as written there: True only with --use_flash_attention and the flag absent (any value given
    # ends up False)
    args.flash_attention_fast_softmax = args.use_flash_attention and args.flash_attention_fast_softmax is None

    # utils.setup_env
    os.environ.setdefault("EXPERIMENTAL_WEIGHT_SHARING", "FALSE")
    if args.world_size > 0:
        os.environ.setdefault("PT_HPU_LAZY_ACC_PAR_MODE", "0")
        os.environ.setdefault("PT_HPU_ENABLE_LAZY_COLLECTIVES", "true")
    if args.use_hpu_graphs and args.limit_hpu_graphs and not args.reuse_cache and args.bucket_internal:
        os.environ.setdefault("PT_HPUGRAPH_DISABLE_TENSOR_CACHE", "1")
    from transformers.utils import check_min_version

    check_min_version("4.51.0")
    from optimum.habana.utils import check_optimum_habana_min_version

    check_optimum_habana_min_version("1.19.0")
    from optimum.habana.transformers.modeling_utils import adapt_transformers_to_gaudi

    adapt_transformers_to_gaudi()

    # utils.setup_device (the emulated machine keeps tensors on the CPU)
    import habana_frameworks.torch.core as htcore  # noqa: F401

    device = torch.device("cpu")

    from transformers import AutoModelForCausalLM, AutoTokenizer

    if args.world_size > 0:
        model, assistant_model = setup_distributed_model(args, dtype)
    else:  # utils.setup_model
        model = AutoModelForCausalLM.from_pretrained(args.model_name_or_path, torch_dtype=dtype)
        assistant_model = AutoModelForCausalLM.from_pretrained(args.assistant_model, torch_dtype=dtype)
        model = model.eval().to(device)
        assistant_model = assistant_model.eval().to(device)
        if args.use_hpu_graphs:
            from habana_frameworks.torch.hpu import wrap_in_hpu_graph

            model = wrap_in_hpu_graph(model, max_graphs=None)
            assistant_model = wrap_in_hpu_graph(assistant_model)

    # utils.setup_tokenizer
    tokenizer = AutoTokenizer.from_pretrained(args.model_name_or_path)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.generation_config.pad_token_id = tokenizer.pad_token_id

    # utils.setup_generation_config
    from optimum.habana.checkpoint_utils import model_is_optimized

    is_optimized = model_is_optimized(model.config)
    generation_config = copy.deepcopy(model.generation_config)
    generation_config.max_new_tokens = args.max_new_tokens
    generation_config.use_cache = True
    generation_config.static_shapes = is_optimized and assistant_model is None
    generation_config.bucket_size = args.bucket_size if is_optimized else -1
    generation_config.bucket_internal = args.bucket_internal
    generation_config.do_sample = False
    generation_config.num_beams = 1
    generation_config.limit_hpu_graphs = args.limit_hpu_graphs
    generation_config.clear_hpu_graphs_cache = False
    generation_config.reuse_cache = args.reuse_cache
    generation_config.reduce_recompile = False
    generation_config.attn_softmax_bf16 = False
    generation_config.use_flash_attention = args.use_flash_attention
    generation_config.flash_attention_recompute = False
    generation_config.flash_attention_causal_mask = args.flash_attention_causal_mask
    generation_config.flash_attention_fast_softmax = args.flash_attention_fast_softmax
    generation_config.valid_sequence_lengths = None

    # run_generation.py: the profilers, the prompts, generate()
    from optimum.habana.utils import HabanaProfile

    profiler = HabanaProfile()
    sentences = ["DeepSpeed is a machine learning framework", "He is working on", "He has a", "He got all"]
    sentences = sentences[: args.batch_size]

    def generate():
        if args.max_input_tokens > 0:  # run_generation.py's tokenization with --max_input_tokens
            input_tokens = tokenizer.batch_encode_plus(sentences, return_tensors="pt", padding="max_length",
                                                       max_length=args.max_input_tokens, truncation=True,
                                                       return_token_type_ids=False)
            generation_config.valid_sequence_lengths = torch.sum(input_tokens["attention_mask"], dim=1,
                                                                 dtype=torch.int32).to(device)
        else:
            input_tokens = tokenizer.batch_encode_plus(sentences, return_tensors="pt", padding=True)
        for t in input_tokens:
            if torch.is_tensor(input_tokens[t]):
                input_tokens[t] = input_tokens[t].to(device)
        iteration_times = []
        # upstream's --dataset_name path (generate_dataset) passes no assistant_model nor iteration_times
        extra = {} if args.dataset_path else dict(assistant_model=assistant_model, iteration_times=iteration_times)
        outputs = model.generate(**input_tokens, generation_config=generation_config, lazy_mode=True,
                                 hpu_graphs=args.use_hpu_graphs, ignore_eos=args.ignore_eos, profiler=profiler,
                                 **extra).cpu()
        if args.dataset_path:
            return outputs, input_tokens, 1.0, 0
        first_token_time = iteration_times[0]
        rest = sum(iteration_times[1:]) / (len(iteration_times) - 1) if len(iteration_times) > 1 else 0
        return outputs, input_tokens, first_token_time, rest

    generate()  # warm-up
    outputs, input_tokens, first_token_time, rest = generate()

    # not upstream: the target-only reference (optimum-habana's own generate, no assistant) and the report
    import optimum_uag

    metrics = optimum_uag.patch.last_metrics()
    optimum_uag.disable()  # the reference is optimum-habana's own generate(), whatever the launcher routes
    reference_config = copy.deepcopy(generation_config)
    reference_config.static_shapes = is_optimized
    reference_inputs = {k: v for k, v in input_tokens.items() if k != "token_type_ids"}  # (the tiny tokenizer's)
    reference = model.generate(**reference_inputs, generation_config=reference_config, lazy_mode=True,
                               hpu_graphs=args.use_hpu_graphs, ignore_eos=args.ignore_eos).cpu()
    from optimum_uag.testing.hpu_emulator import _current

    emulator = _current()
    report = {"sequences": outputs.tolist(), "reference": reference.tolist(), "first_token_time": first_token_time,
              "rest_token_time": rest, "routed": metrics is not None,
              "target_calls": getattr(metrics, "target_calls", None),
              "captures": dict(emulator.captures) if emulator else None, "world_size": args.world_size,
              "rank": args.local_rank, "target_on_meta": getattr(args, "target_on_meta", None),
              "sharded": getattr(args, "sharded", None),
              "texts": tokenizer.batch_decode(outputs, skip_special_tokens=True)}
    if args.world_size > 0:  # one report per rank
        args.output = f"{args.output}.{args.local_rank}"
    with open(args.output, "w") as f:
        json.dump(report, f)


def setup_distributed_model(args, dtype):
    """utils.setup_distributed_model (v1.21), in its order; the emulated machine's differences in the module doc."""
    import tempfile

    import deepspeed
    from transformers import AutoConfig, AutoModelForCausalLM

    from optimum.habana.checkpoint_utils import get_ds_injection_policy, model_on_meta, write_checkpoints_json

    deepspeed.init_distributed(dist_backend="gloo")
    config = AutoConfig.from_pretrained(args.model_name_or_path, torch_dtype=dtype)
    load_to_meta = model_on_meta(config)
    if load_to_meta:
        with deepspeed.OnDevice(dtype=dtype, device="meta"):
            if config.model_type == "llama" and config.max_position_embeddings > 8192:
                config.max_position_embeddings = 8192
            model = AutoModelForCausalLM.from_config(config, torch_dtype=dtype)
        checkpoints_json = tempfile.NamedTemporaryFile(suffix=".json", mode="+w")
        write_checkpoints_json(args.model_name_or_path, args.local_rank, checkpoints_json, token=None)
    else:
        with deepspeed.OnDevice(dtype=dtype, device="cpu"):
            model = AutoModelForCausalLM.from_pretrained(args.model_name_or_path, torch_dtype=dtype)
    model.eval()
    assistant_model = AutoModelForCausalLM.from_pretrained(args.assistant_model, torch_dtype=dtype).eval()
    kwargs = {"dtype": dtype, "tensor_parallel": {"tp_size": args.world_size}, "enable_cuda_graph": False,
              "injection_policy": get_ds_injection_policy(config)}
    if load_to_meta:
        kwargs["checkpoint"] = checkpoints_json.name
    model = deepspeed.init_inference(model, **kwargs).module
    _shard_head_counts(model)
    if model.config.model_type in ["llama", "falcon", "qwen2", "starcoder2", "gemma"]:
        from deepspeed.module_inject.layers import LinearAllreduce

        from optimum.habana.transformers.models.modeling_all_models import ScopedLinearAllReduce

        def patch_scoped_linear_all_reduce(module):
            for name, child in module.named_children():
                if type(child) is LinearAllreduce:
                    setattr(module, name, ScopedLinearAllReduce(mod=child))
                patch_scoped_linear_all_reduce(child)

        patch_scoped_linear_all_reduce(model)
    args.target_on_meta = load_to_meta
    attention = model.model.layers[0].self_attn
    args.sharded = {"scoped_all_reduce": sum(type(m).__name__ == "ScopedLinearAllReduce" for m in model.modules()),
                    "layers": config.num_hidden_layers, "q_rows": attention.q_proj.weight.shape[0],
                    "q_rows_whole": config.num_attention_heads * attention.head_dim}
    return model, assistant_model


def _shard_head_counts(model) -> None:
    """Not upstream: the installed DeepSpeed (0.19) leaves an attention module's head counts whole when its
    parameters carry no universal-checkpoint metadata (AutoTP.update_mp_params returns early), so optimum-habana's
    allocate_kv_cache would size every rank's cache for all heads; Habana's DeepSpeed, which upstream runs with,
    divides them. Here they are divided as the sharded projections are."""
    for module in model.modules():
        q, k = getattr(module, "q_proj", None), getattr(module, "k_proj", None)
        head_dim = getattr(module, "head_dim", None)
        if q is None or k is None or not head_dim:
            continue
        if hasattr(module, "num_key_value_heads"):
            module.num_key_value_heads = k.weight.shape[0] // head_dim
        if hasattr(module, "num_heads"):
            module.num_heads = q.weight.shape[0] // head_dim


if __name__ == "__main__":
    main()
