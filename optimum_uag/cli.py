"""`optimum-uag generate`: assisted generation from the command line (flags as optimum-habana's run_generation.py)."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from . import distributed

# optimum-habana flags that have nothing to do here: accepted (its command lines run unchanged), reported as no-ops
ACCEPTED_ONLY = {
    "flash_attention_causal_mask": "optimum-uag always passes its own mask (a verify block is not a lone prompt)",
    "flash_attention_fast_softmax": "no effect here",
    "trim_logits": "the engine keeps only the logits it needs",
    "attn_softmax_bf16": "no effect here",
    "limit_hpu_graphs": "the shapes are already bounded",
    "bucket_internal": "the caches are allocated once",
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="optimum-uag generate",
        description="Speculative decoding with any draft model. With no model arguments it runs the embedded pair "
                    "(a 25M Llama target + a 1.6M GPT-NeoX draft with a different tokenizer).",
    )
    p.add_argument("--model_name_or_path", default=None, help="target model directory (default: embedded target)")
    p.add_argument("--assistant_model", default=None, help="draft model directory (default: embedded cross-tokenizer draft)")
    p.add_argument("--assistant_tokenizer", default=None, help="draft tokenizer (default: the assistant's own)")
    p.add_argument("--no_assistant", action="store_true", help="target-only generation")
    p.add_argument("--prompt_lookup_num_tokens", type=int, default=None, help="n-gram drafting instead of a draft model")
    p.add_argument("--max_new_tokens", type=int, default=64)
    p.add_argument("--max_input_tokens", type=int, default=0, help="truncate prompts to this many tokens (0: no limit)")
    p.add_argument("--batch_size", type=int, default=1)
    p.add_argument("--do_sample", action="store_true")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top_k", type=int, default=0)
    p.add_argument("--top_p", type=float, default=1.0)
    p.add_argument("--num_assistant_tokens", type=int, default=5)
    p.add_argument("--num_assistant_tokens_schedule", choices=["constant", "heuristic", "confidence"], default="constant")
    p.add_argument("--assistant_confidence_threshold", type=float, default=0.4)
    p.add_argument("--prompt", action="append", default=None, help="a prompt (repeatable)")
    p.add_argument("--prompt_file", default=None, help="jsonl ({'prompt': ...} per line) or text (one prompt per line)")
    p.add_argument("--dataset_name", default=None, help="'embedded' (held-out code prompts); hub datasets need a network")
    p.add_argument("--n_iterations", type=int, default=1)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--seed", type=int, default=27)
    p.add_argument("--output_dir", default=None, help="write results.json here")
    p.add_argument("--compare_baseline", action="store_true",
                   help="also run transformers' own assisted generation on the same inputs and report the ratio")
    p.add_argument("--device", choices=["auto", "hpu", "cuda", "cpu"], default="auto")
    p.add_argument("--emulate_hpu", action="store_true",
                   help="dry-run a Gaudi configuration on CPU: optimum-habana's Gaudi model classes under the HPU "
                        "emulator (real CPU math); reports how many HPU graphs each model would capture")
    p.add_argument("--bf16", action="store_true", help="run both models in bfloat16")
    p.add_argument("--use_kv_cache", action="store_true", default=True, help="always on (static KV caches)")
    p.add_argument("--static_shapes", action="store_true", default=True, help="always on (static shapes)")
    p.add_argument("--use_hpu_graphs", action="store_true", help="Gaudi: wrap both models in HPU graphs")
    p.add_argument("--reuse_cache", action="store_true", help="Gaudi: preallocated KV caches")
    p.add_argument("--bucket_size", type=int, default=-1, help="Gaudi: bucketed KV cache (accepted for compatibility)")
    p.add_argument("--load_quantized_model_with_inc", action="store_true",
                   help="Gaudi: load a checkpoint already quantized to FP8 with INC")
    # optimum-habana's attention / graph knobs, so its command lines run unchanged
    p.add_argument("--use_flash_attention", action="store_true", help="Gaudi: FusedSDPA attention (our explicit mask)")
    p.add_argument("--flash_attention_recompute", action="store_true", help="Gaudi: recompute FusedSDPA in backward")
    for flag, why in ACCEPTED_ONLY.items():
        p.add_argument(f"--{flag}", action="store_true", help=f"accepted; {why}")
    p.add_argument("--torch_compile", action="store_true", help="not supported (refused with the alternative)")
    p.add_argument("--local_rank", type=int, default=-1, help="set by the deepspeed launcher (unused)")
    p.add_argument("--shard_assistant", action="store_true",
                   help="multi-card: shard the assistant with AutoTP too (default: replicated on every rank)")
    p.add_argument("--ignore_eos", action="store_true", help="generate max_new_tokens even past EOS (benchmarks)")
    p.add_argument("--assistant_quant_config", default=None,
                   help="quantize the assistant too (a JSON as QUANT_CONFIG; e.g. maxabs_quant_assistant.json)")
    return p


GAUDI_ONLY = ("use_hpu_graphs", "reuse_cache", "load_quantized_model_with_inc", "use_flash_attention",
              "flash_attention_recompute")


def fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def read_prompts(args) -> tuple[list[str], str]:
    if args.prompt:
        return list(args.prompt), "command line"
    if args.prompt_file:
        path = Path(args.prompt_file)
        if not path.is_file():
            fail(f"--prompt_file {path} does not exist")
        prompts = []
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            if path.suffix == ".jsonl":
                try:
                    record = json.loads(line)
                    prompts.append(record["prompt"] if isinstance(record, dict) else str(record))
                except (json.JSONDecodeError, KeyError, TypeError) as exc:
                    fail(f"{path}:{number}: expected a JSON object with a 'prompt' key ({exc})")
            else:
                prompts.append(line.replace("\\n", "\n"))
        if not prompts:
            fail(f"{path} holds no prompts")
        return prompts, str(path)
    if args.dataset_name not in (None, "embedded"):
        fail(f"--dataset_name {args.dataset_name}: nothing is downloaded here (offline); use --prompt_file or "
             "--dataset_name embedded")
    from .models import eval_prompts

    return eval_prompts(), "embedded held-out prompts"


def resolve_device(name: str, emulate_hpu: bool = False):
    """The torch device; on Gaudi (or emulated) also adapts transformers to optimum-habana first."""
    import torch

    if emulate_hpu:
        if name not in ("auto", "hpu", "cpu"):
            fail(f"--emulate_hpu runs on the CPU; drop --device {name}")
        from . import gaudi
        from .testing.hpu_emulator import HPUEmulator

        EMULATOR.append(HPUEmulator().__enter__())  # for the whole process: models bind it at import time
        gaudi.enable()
        return torch.device("cpu")
    if name == "hpu":
        try:
            import habana_frameworks.torch.core  # noqa: F401
        except ImportError:
            fail("--device hpu needs Intel Gaudi (habana_frameworks is not installed); add --emulate_hpu to "
                 "dry-run the Gaudi configuration on CPU, or use --device cpu")
        from . import gaudi

        gaudi.enable()
        return torch.device("hpu")
    if name == "cuda" and not torch.cuda.is_available():
        fail("--device cuda but no CUDA device is available; use --device cpu")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


EMULATOR: list = []


def load(path: str | None, default: str, device, dtype):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .models import embedded_models

    path = path or embedded_models()[default]
    if not Path(path).is_dir():
        fail(f"model path '{path}' is not a local directory; nothing is downloaded (offline): pass a directory "
             "holding config.json and the weights")
    try:
        model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=dtype, local_files_only=True).to(device).eval()
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError) as exc:
        fail(f"could not load '{path}': {exc}")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return model, tokenizer, path


def timed(fn, sync):
    sync()
    t0 = time.perf_counter()
    out = fn()
    sync()
    return out, time.perf_counter() - t0


def count_new(sequences, prompt_len: int, eos_ids) -> int:
    """Tokens actually generated: up to and including each row's EOS (not batch * max_new_tokens)."""
    new = sequences[:, prompt_len:].tolist()
    total = 0
    for row in new:
        n = len(row)
        for i, t in enumerate(row):
            if t in eos_ids:
                n = i + 1
                break
        total += n
    return total


def run_generate(argv=None) -> dict:
    args = build_parser().parse_args(argv)
    import torch

    from . import assisted_generate

    on_gaudi = args.device == "hpu" or args.emulate_hpu
    for flag in GAUDI_ONLY:
        if getattr(args, flag) and not on_gaudi:
            fail(f"--{flag} needs Intel Gaudi: run with --device hpu on Gaudi, add --emulate_hpu to dry-run the "
                 "Gaudi configuration on this CPU, or drop the flag to run on --device cpu")
    if args.torch_compile:
        fail("--torch_compile is not supported by optimum-uag (static caches + HPU graphs already fix the shapes); "
             "drop it, and use --use_hpu_graphs on Gaudi")
    if args.load_quantized_model_with_inc and args.emulate_hpu:
        fail("--load_quantized_model_with_inc loads an FP8 checkpoint for HPU kernels; on CPU quantize at load time "
             "with QUANT_CONFIG=habana_configs/quantization_config/maxabs_quant_qdq.json instead")
    if args.batch_size < 1 or args.max_new_tokens < 1 or args.n_iterations < 1:
        fail("--batch_size, --max_new_tokens and --n_iterations must be >= 1")
    quant_config = os.environ.get("QUANT_CONFIG")
    for path in (quant_config, args.assistant_quant_config):
        if path:
            from .quantization import quant_kind, read_quant_config

            try:
                quant_kind(read_quant_config(path))
            except (OSError, ValueError) as exc:
                fail(str(exc))
    torch.manual_seed(args.seed)
    device = resolve_device(args.device, args.emulate_hpu)
    dtype = torch.bfloat16 if args.bf16 else torch.float32
    ws = distributed.world_size()
    if ws > 1:
        if args.emulate_hpu:
            fail("--emulate_hpu runs one process; drop it for a multi-card run (DeepSpeed over gloo runs on CPU)")
        distributed.init(device)
    elif args.shard_assistant:
        fail("--shard_assistant needs a multi-card launch (deepspeed --num_gpus N ...)")
    model, tokenizer, target_path = load(args.model_name_or_path, "target", device, dtype)
    assistant = assistant_tok = None
    assistant_path = None
    if not args.no_assistant and not args.prompt_lookup_num_tokens:
        assistant, assistant_tok, assistant_path = load(args.assistant_model, "assistant", device, dtype)
        if args.assistant_tokenizer:
            from transformers import AutoTokenizer

            assistant_tok = AutoTokenizer.from_pretrained(args.assistant_tokenizer, local_files_only=True)
    if ws > 1:
        try:
            model = distributed.shard(model, dtype, "target")
            if assistant is not None and args.shard_assistant:
                assistant = distributed.shard(assistant, dtype, "assistant")
        except ValueError as exc:
            fail(str(exc))
    model = maybe_quantize(model, quant_config, "QUANT_CONFIG")
    if assistant is not None:
        assistant = maybe_quantize(assistant, args.assistant_quant_config, "--assistant_quant_config")
    gaudi_kwargs = {}
    if on_gaudi:
        from .gaudi.device import graph_wrapped

        gaudi_kwargs = dict(lazy_mode=os.environ.get("PT_HPU_LAZY_MODE", "1") != "0", hpu_graphs=args.use_hpu_graphs)
        config = model.generation_config  # what optimum-habana's example sets for its own static-shape loop
        config.static_shapes, config.reuse_cache, config.bucket_size = True, True, -1
        config.ignore_eos, config.trim_logits = args.ignore_eos, True
        config.use_flash_attention = args.use_flash_attention
        config.flash_attention_recompute = args.flash_attention_recompute
        for name, m in (("target", model), ("assistant", assistant)):
            if m is not None:
                if EMULATOR:
                    EMULATOR[0].name(m, name)
                if args.use_hpu_graphs:
                    graph_wrapped(m)

    prompts, source = read_prompts(args)
    notes = []
    ignored = [f"--{flag}" for flag in ACCEPTED_ONLY if getattr(args, flag)]
    if ignored:
        notes.append(f"accepted for compatibility with optimum-habana, no effect here: {', '.join(ignored)}")
    if args.batch_size > len(prompts):
        notes.append(f"batch_size {args.batch_size} > {len(prompts)} prompts: prompts are repeated to fill the batch")
        prompts = (prompts * args.batch_size)[: args.batch_size]
    batches = [prompts[i : i + args.batch_size] for i in range(0, len(prompts), args.batch_size)]
    batches = [b for b in batches if len(b) == args.batch_size] or batches[:1]
    encode_kw = dict(return_tensors="pt", padding=True, return_token_type_ids=False)
    if args.max_input_tokens > 0:  # as optimum-habana: one static prompt shape (pad to the limit, cut the left)
        encode_kw.update(truncation=True, max_length=args.max_input_tokens, padding="max_length")
        tokenizer.truncation_side = "left"
    encoded = [tokenizer(b, **encode_kw).to(device) for b in batches]

    gen_kwargs = dict(max_new_tokens=args.max_new_tokens, do_sample=args.do_sample, pad_token_id=tokenizer.pad_token_id,
                      **gaudi_kwargs)
    if args.ignore_eos and not on_gaudi:
        gen_kwargs["eos_token_id"] = None
    if args.do_sample:
        gen_kwargs.update(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def ours(enc):
        extra = dict(num_assistant_tokens=args.num_assistant_tokens,
                     num_assistant_tokens_schedule=args.num_assistant_tokens_schedule,
                     assistant_confidence_threshold=args.assistant_confidence_threshold)
        if args.prompt_lookup_num_tokens:
            extra["prompt_lookup_num_tokens"] = args.prompt_lookup_num_tokens
        return assisted_generate(model, assistant, enc["input_ids"], enc["attention_mask"], tokenizer=tokenizer if assistant else None,
                                 assistant_tokenizer=assistant_tok if assistant else None, **gen_kwargs, **extra)

    def target_only(enc):
        return model.generate(**enc, **gen_kwargs)

    def transformers_assisted(enc):
        kw = dict(gen_kwargs, assistant_model=assistant, num_assistant_tokens=args.num_assistant_tokens)
        if assistant_tok is not None and not _same(tokenizer, assistant_tok):
            kw.update(tokenizer=tokenizer, assistant_tokenizer=assistant_tok)
        assistant.generation_config.num_assistant_tokens_schedule = "constant"
        return model.generate(**enc, **kw)

    eos = None if args.ignore_eos else model.generation_config.eos_token_id
    eos_ids = set(eos if isinstance(eos, list) else [eos]) if eos is not None else set()
    use_drafting = assistant is not None or bool(args.prompt_lookup_num_tokens)
    runs = {"target_only": target_only}
    if use_drafting:
        runs["optimum_uag"] = ours
        if args.compare_baseline and assistant is not None:
            if on_gaudi:
                notes.append("optimum-habana's own assisted generation fails on Gaudi models (tuple-cache .crop(), "
                             "static-shape mismatches): transformers baseline skipped")
            elif args.batch_size > 1:
                notes.append("transformers' assisted generation supports batch size 1 only: baseline skipped")
            else:
                runs["transformers_assisted"] = transformers_assisted
    results = {name: {"seconds": 0.0, "tokens": 0} for name in runs}
    metrics_total = None
    last = {}
    from tqdm.auto import tqdm

    for _ in range(args.warmup):
        for fn in runs.values():
            torch.manual_seed(args.seed)
            fn(encoded[0])
    steps = [(it, b) for it in range(args.n_iterations) for b in range(len(encoded))]
    for it, b in tqdm(steps, desc="generate", disable=not sys.stderr.isatty() or distributed.rank() != 0):
        enc = encoded[b]
        prompt_len = enc["input_ids"].shape[1]
        for name, fn in runs.items():  # side by side, same inputs
            torch.manual_seed(args.seed + it)
            out, seconds = timed(lambda: fn(enc), sync)
            seqs = out.sequences if hasattr(out, "sequences") else out
            results[name]["seconds"] += seconds
            results[name]["tokens"] += count_new(seqs, prompt_len, eos_ids)
            last[name] = seqs
            if name == "optimum_uag":
                m = out.metrics
                if metrics_total is None:
                    metrics_total = m
                else:
                    for field in ("target_calls", "draft_tokens", "accepted_tokens", "generated_tokens",
                                  "row_target_calls", "draft_seconds", "translate_seconds", "verify_seconds",
                                  "bookkeeping_seconds"):
                        setattr(metrics_total, field, getattr(metrics_total, field) + getattr(m, field))

    def tps(name):
        r = results[name]
        return r["tokens"] / r["seconds"] if r["seconds"] else 0.0

    main_name = "optimum_uag" if use_drafting else "target_only"
    report = {
        "throughput_tokens_per_s": tps(main_name),
        "target_only_tokens_per_s": tps("target_only"),
        "speedup_vs_target": tps(main_name) / tps("target_only") if tps("target_only") else None,
        "generated_tokens": results[main_name]["tokens"],
        "world_size": ws,
        "prompt_source": source,
        "notes": notes,
        "target": target_path,
        "assistant": assistant_path,
        "device": str(device),
        "args": vars(args),
    }
    if "transformers_assisted" in results:
        report["transformers_assisted_tokens_per_s"] = tps("transformers_assisted")
        report["speedup_vs_transformers"] = tps(main_name) / tps("transformers_assisted")
    if metrics_total is not None:
        m = metrics_total
        round_time = m.draft_seconds + m.translate_seconds + m.verify_seconds + m.bookkeeping_seconds
        report.update(
            tau=m.tau, acceptance_rate=m.acceptance_rate, target_calls=m.target_calls,
            translate_share=m.translate_seconds / round_time if round_time else 0.0,
            graph_captures={"target": len(m.target_shapes), "assistant": len(m.draft_shapes)},
        )
        if not args.do_sample:
            report["outputs_match_target"] = bool(torch.equal(last["optimum_uag"], last["target_only"]))
    if EMULATOR:
        report["device"] = "hpu (emulated on CPU)"
    if EMULATOR and args.use_hpu_graphs:  # what the emulator saw: captures per model over the whole run (warmup included)
        report["graph_captures"] = {name: n for name, n in EMULATOR[0].captures.items()
                                    if name in ("target", "assistant")}
    from .quantization import finalize_measurements

    if finalize_measurements(model):
        notes.append("FP8 measurement dumped; rerun with QUANT_CONFIG pointing at the matching quantize config")
    if ws > 1:  # every rank decoded the same tokens (sharded target, replicated draft, same seed)
        report["ranks_agree"] = distributed.ranks_agree(last[main_name])
        report["assistant_sharded"] = bool(args.shard_assistant)
    report["output_ids"] = [row[encoded[-1]["input_ids"].shape[1]:] for row in last[main_name].tolist()]
    report["sample_text"] = tokenizer.decode(report["output_ids"][0], skip_special_tokens=True)
    return report


def maybe_quantize(model, path: str | None, flag: str):
    """Quantize with INC as the JSON says (FP8 measure/quantize, RTN); errors name the flag and the fix."""
    if not path:
        return model
    from .quantization import quantize_model

    try:
        return quantize_model(model, path)
    except (OSError, ValueError, RuntimeError) as exc:
        fail(f"{flag}={path}: quantization failed: {exc}")


def _same(a, b) -> bool:
    from .translation import same_vocabulary

    return same_vocabulary(a, b)


def print_report(report: dict) -> None:
    print("=" * 72)
    print(f"target     {report['target']}")
    print(f"assistant  {report['assistant'] or '(none)'}   device {report['device']}   prompts: {report['prompt_source']}")
    for note in report["notes"]:
        print(f"note: {note}")
    print("-" * 72)
    print("sample continuation:")
    print(report["sample_text"][:400])
    print("-" * 72)
    print(f"throughput           {report['throughput_tokens_per_s']:8.1f} tok/s")
    print(f"target-only          {report['target_only_tokens_per_s']:8.1f} tok/s")
    if report.get("speedup_vs_target") is not None:
        print(f"speedup vs target    {report['speedup_vs_target']:8.2f}x")
    if "speedup_vs_transformers" in report:
        print(f"speedup vs transformers assisted generation {report['speedup_vs_transformers']:.2f}x")
    if "tau" in report:
        print(f"tau (tokens/target call) {report['tau']:.2f}   acceptance {report['acceptance_rate']:.1%}   "
              f"translate share {report['translate_share']:.1%}")
    if "outputs_match_target" in report:
        print(f"outputs identical to target-only greedy: {report['outputs_match_target']}")
    print("=" * 72)


def generate_main(argv=None) -> int:
    try:
        report = run_generate(argv)
    finally:
        distributed.shutdown()
    if distributed.rank() != 0:
        return 0
    print_report(report)
    out_dir = report["args"].get("output_dir")
    if out_dir:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / "results.json").write_text(json.dumps(report, indent=2, default=str))
        print(f"wrote {Path(out_dir) / 'results.json'}")
    return 0


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "generate":
        return generate_main(argv[1:])
    if argv and argv[0] == "tune":
        from .tune import tune_main

        return tune_main(argv[1:])
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: optimum-uag generate [flags]   run assisted generation (optimum-uag generate --help)\n"
              "       optimum-uag tune [flags]       rank drafts and K on your prompts (optimum-uag tune --help)")
        return 0
    return generate_main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
