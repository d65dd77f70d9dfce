"""`optimum-uag tune`: pick the draft and the number of draft tokens for YOUR prompts, by measuring.

For each candidate assistant and each K of a small grid (constant schedule), plus the dynamic schedules (and for a
feature head, draft tree shapes), it runs assisted generation on the same prompts, each batch right after the
fastest target-only path of this device on the same batch (on a CPU: the target on prepacked weights), and reports
acceptance, tau (tokens per target call) and the speedup over that path. It also measures the target's verify cost
curve (one forward of W tokens / one of 1 token), what decides how wide a tree pays. Ranked table, results.json,
a PNG plot (speedup vs K per draft) and the recommended command line.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from .common import fail

# (depth, top_k, nodes) tried for a feature head: the candidates of the default (engine/config.py DEVICE_TREES, which
# a CPU run chooses among by its measured verify cost) and wider trees
TREE_GRID = ((1, 2, 2), (3, 2, 5), (4, 3, 8), (5, 4, 12), (5, 4, 16), (6, 4, 24))
from .loading import load_assistant, load, resolve_device
from .prompts import apply_chat, read_prompts


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="optimum-uag tune", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model_name_or_path", default=None, help="target model directory (default: embedded target)")
    p.add_argument("--assistant_model", action="append", default=None,
                   help="a candidate draft directory (repeatable; default: both embedded drafts)")
    p.add_argument("--prompt_lookup", action="store_true", help="also try n-gram prompt lookup (no draft model)")
    p.add_argument("--prompt", action="append", default=None)
    p.add_argument("--prompt_file", default=None, help="jsonl ({'prompt': ...} per line) or text, one per line")
    p.add_argument("--num_prompts", type=int, default=8, help="use the first N prompts")
    p.add_argument("--num_assistant_tokens", default="1,3,5,8", help="comma-separated K grid (constant schedule)")
    p.add_argument("--schedules", default="heuristic,confidence",
                   help="dynamic schedules to try too (comma-separated; 'none' for none)")
    p.add_argument("--max_new_tokens", type=int, default=64)
    p.add_argument("--batch_size", type=int, default=1)
    p.add_argument("--do_sample", action="store_true")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--repeats", type=int, default=1, help="timed passes per configuration (best is kept)")
    p.add_argument("--seed", type=int, default=27)
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    p.add_argument("--output_dir", default="tune_results", help="results.json and speedup.png go here")
    return p


def _grid(text: str) -> list[int]:
    try:
        values = sorted({int(v) for v in text.split(",") if v.strip()})
    except ValueError:
        fail(f"--num_assistant_tokens must be comma-separated integers, got {text!r}")
    if not values or values[0] < 1:
        fail(f"--num_assistant_tokens values must be >= 1, got {text!r}")
    return values


def run_tune(argv=None) -> dict:
    import torch

    args = build_parser().parse_args(argv)
    grid = _grid(args.num_assistant_tokens)
    schedules = [s for s in args.schedules.split(",") if s.strip() and s != "none"]
    for s in schedules:
        if s not in ("heuristic", "confidence"):
            fail(f"--schedules: unknown schedule {s!r} (heuristic, confidence, or none)")
    if args.num_prompts < 1 or args.batch_size < 1 or args.max_new_tokens < 1 or args.repeats < 1:
        fail("--num_prompts, --batch_size, --max_new_tokens and --repeats must be >= 1")
    device, _ = resolve_device(args.device)
    model, tokenizer, target_path = load(args.model_name_or_path, "target", device, torch.float32)
    encoded, source, n_prompts = _inputs(args, tokenizer, device)
    gen = dict(max_new_tokens=args.max_new_tokens, do_sample=args.do_sample, pad_token_id=tokenizer.pad_token_id)
    if args.do_sample:
        gen.update(temperature=args.temperature, top_k=0)
    configs = _configs(args, device, grid, schedules)
    timer = _Timer(args, encoded)
    baselines = _baselines(model, gen)
    seconds = {}
    for name, fn in baselines.items():
        fn(encoded[0])  # warm-up
        seconds[name] = timer(fn)[0]
    best = min(seconds, key=seconds.get)  # the fastest target-only path here: every config is paired with it
    base_outs = timer(baselines["target_only"])[1]
    rows = [_measure(c, model, tokenizer, gen, timer, baselines[best], seconds["target_only"] / seconds[best],
                     base_outs, args.do_sample) for c in _progress(configs)]
    rows.sort(key=lambda r: r["speedup_vs_best_target_only"], reverse=True)
    from ..runners.cost import verify_cost

    return {
        "target": target_path, "prompt_source": source, "num_prompts": n_prompts,
        "target_only_seconds": seconds, "best_target_only": best, "results": rows, "best": rows[0],
        "verify_cost": verify_cost(model, (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)),
        "recommended_command": _command(args, rows[0]), "args": vars(args),
    }


def _baselines(model, gen) -> dict:
    """Target-only paths of this device: transformers' generate(), and on a CPU the same on prepacked weights."""
    from ..runners.packed import packed_weights

    out = {"target_only": lambda enc: model.generate(**enc, **gen)}
    pack = packed_weights(model) if model.device.type == "cpu" else None
    if pack is not None:
        def packed(enc):
            with pack:
                return model.generate(**enc, **gen)

        out["target_only_packed"] = packed
    return out


def _inputs(args, tokenizer, device):
    prompts, source = read_prompts(argparse.Namespace(prompt=args.prompt, prompt_file=args.prompt_file,
                                                      dataset_name=None))
    prompts, templated = apply_chat(tokenizer, prompts, False, None)
    prompts = prompts[: args.num_prompts]
    batches = [prompts[i : i + args.batch_size] for i in range(0, len(prompts), args.batch_size)]
    encoded = [tokenizer(b, return_tensors="pt", padding=True, return_token_type_ids=False,
                         add_special_tokens=not templated).to(device) for b in batches]
    return encoded, source, len(prompts)


def _configs(args, device, grid, schedules) -> list[tuple]:
    """(name, path, draft, draft tokenizer, K, schedule) for every draft and K, the dynamic schedules, lookup."""
    import torch

    from ..models import embedded_models

    paths = args.assistant_model or [embedded_models()["assistant"], embedded_models()["assistant_same_tokenizer"]]
    configs = []
    for path in paths:
        assistant, assistant_tok, resolved = load_assistant(path, device, torch.float32)
        name = Path(resolved).name
        configs += [(name, resolved, assistant, assistant_tok, k, "constant") for k in grid]
        configs += [(name, resolved, assistant, assistant_tok, 5, s) for s in schedules]
        if type(assistant).__name__ == "FeatureHead":  # draft trees: (depth, top_k, nodes) around the default
            configs += [(name, resolved, assistant, assistant_tok, None, shape) for shape in TREE_GRID]
    if args.prompt_lookup:
        configs += [("prompt_lookup", None, None, None, k, "constant") for k in grid]
    return configs


class _Timer:
    """(seconds, outputs, metrics list) of one pass over all batches; best of --repeats. With a `base`, each batch
    runs right after the baseline on the same batch (paired: this CPU drifts within a run), and the baseline's
    seconds of the same pass come fourth."""

    def __init__(self, args, encoded):
        self.args, self.encoded = args, encoded

    def __call__(self, fn, base=None):
        import torch

        best = None
        for _ in range(self.args.repeats):
            outs, metrics, seconds, base_seconds = [], [], 0.0, 0.0
            for enc in self.encoded:
                if base is not None:
                    torch.manual_seed(self.args.seed)
                    t0 = time.perf_counter()
                    base(enc)
                    base_seconds += time.perf_counter() - t0
                torch.manual_seed(self.args.seed)
                t0 = time.perf_counter()
                out = fn(enc)
                seconds += time.perf_counter() - t0
                outs.append(out.sequences if hasattr(out, "sequences") else out)
                if hasattr(out, "metrics"):
                    metrics.append(out.metrics)
            ratio = base_seconds / seconds if base is not None and seconds else 0.0
            if best is None or ratio > best[3] or (base is None and seconds < best[0]):
                best = (seconds, outs, metrics, ratio)
        return best


def _progress(configs):
    from tqdm.auto import tqdm

    return tqdm(configs, desc="tune", disable=not sys.stderr.isatty())


def _measure(config, model, tokenizer, gen, timer, base, best_vs_generate, base_outs, do_sample) -> dict:
    import torch

    from .. import assisted_generate
    from ..engine.metrics import Metrics

    name, path, assistant, assistant_tok, k, schedule = config
    tree = schedule if isinstance(schedule, tuple) else None

    def ours(enc):
        if tree is not None:  # every round drafts the tree (the shape measured, not the adaptive policy's choice)
            extra = dict(draft_tree=True, tree_depth=tree[0], tree_top_k=tree[1], tree_nodes=tree[2],
                         draft_policy="fixed")
        else:
            extra = dict(num_assistant_tokens=k, num_assistant_tokens_schedule=schedule)
            if type(assistant).__name__ == "FeatureHead":  # the K grid: chains
                extra["draft_tree"] = False
        if assistant is None:
            extra["prompt_lookup_num_tokens"] = k
        pair = dict(tokenizer=tokenizer, assistant_tokenizer=assistant_tok) if assistant_tok is not None else {}
        return assisted_generate(model, assistant, enc["input_ids"], enc["attention_mask"], **pair, **gen, **extra)

    ours(timer.encoded[0])  # warm-up (first-call costs: vocabulary intersection, allocations)
    seconds, outs, metrics, ratio = timer(ours, base)
    total = Metrics()
    for m in metrics:
        total.merge(m)
    return {
        "draft": name, "assistant_model": path, "num_assistant_tokens": None if tree else k,
        "schedule": "tree" if tree else schedule, "tree": list(tree) if tree else None,
        "speedup_vs_best_target_only": ratio, "speedup_vs_transformers_generate": ratio * best_vs_generate,
        "tau": total.tau, "acceptance_rate": total.acceptance_rate, "seconds": seconds,
        "outputs_match_target": None if do_sample else all(torch.equal(a, b) for a, b in zip(outs, base_outs)),
    }


def _command(args, best: dict) -> str:
    command = ["optimum-uag", "generate"]
    if args.model_name_or_path:
        command += ["--model_name_or_path", args.model_name_or_path]
    if best["assistant_model"] is None:
        command += ["--prompt_lookup_num_tokens", str(best["num_assistant_tokens"])]
    elif best["tree"]:
        depth, top_k, nodes = best["tree"]
        command += ["--assistant_model", best["assistant_model"], "--draft_tree", "on", "--tree_depth", str(depth),
                    "--tree_top_k", str(top_k), "--tree_nodes", str(nodes), "--draft_policy", "fixed"]
    else:
        command += ["--assistant_model", best["assistant_model"], "--num_assistant_tokens",
                    str(best["num_assistant_tokens"]), "--num_assistant_tokens_schedule", best["schedule"]]
    return " ".join(command)


def plot(report: dict, path: Path) -> bool:
    """Speedup vs K per draft (constant schedule), dynamic schedules as markers; False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.2))
    drafts = sorted({r["draft"] for r in report["results"]})
    for i, draft in enumerate(drafts):
        color = f"C{i}"
        const = sorted((r["num_assistant_tokens"], r["speedup_vs_best_target_only"]) for r in report["results"]
                       if r["draft"] == draft and r["schedule"] == "constant")
        if const:
            ax.plot(*zip(*const), marker="o", color=color, label=f"{draft} (constant K)")
        for r in report["results"]:
            if r["draft"] == draft and r["schedule"] != "constant":
                label = f"tree {r['tree']}" if r["tree"] else r["schedule"]
                ax.axhline(r["speedup_vs_best_target_only"], color=color,
                           linestyle="--" if r["schedule"] == "heuristic" else ":", label=f"{draft} ({label})")
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xlabel("num_assistant_tokens (K)")
    ax.set_ylabel(f"speedup vs {report['best_target_only']}")
    ax.set_title("optimum-uag tune")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def print_table(report: dict) -> None:
    print(f"speedups against the fastest target-only path here ({report['best_target_only']}), paired per batch")
    print(f"{'rank':>4}  {'draft':<28} {'K / tree':>10} {'schedule':<10} {'speedup':>8} {'tau':>6} {'accept':>7}  exact")
    for i, r in enumerate(report["results"], 1):
        exact = "-" if r["outputs_match_target"] is None else ("yes" if r["outputs_match_target"] else "NO")
        shape = "x".join(map(str, r["tree"])) if r["tree"] else str(r["num_assistant_tokens"])
        print(f"{i:>4}  {r['draft']:<28} {shape:>10} {r['schedule']:<10} "
              f"{r['speedup_vs_best_target_only']:>7.2f}x {r['tau']:>6.2f} {r['acceptance_rate']:>6.1%}  {exact}")
    cost = report["verify_cost"]
    print("verify cost (one W-token forward / one 1-token forward): "
          + ", ".join(f"W={w}: {c:.2f}" for w, c in cost["relative"].items()))
    print(f"recommended: {report['recommended_command']}")


def tune_main(argv=None) -> int:
    report = run_tune(argv)
    print_table(report)
    out = Path(report["args"]["output_dir"])
    out.mkdir(parents=True, exist_ok=True)
    if plot(report, out / "speedup.png"):
        report["plot"] = str(out / "speedup.png")
    else:
        print("note: matplotlib is not installed (pip install 'optimum-uag[plot]'): no plot written")
    (out / "results.json").write_text(json.dumps(report, indent=2, default=str))
    print(f"wrote {out / 'results.json'}")
    return 0
