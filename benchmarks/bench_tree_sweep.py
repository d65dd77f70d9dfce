#!/usr/bin/env python
"""Which fixed draft tree pays for SmolLM2 and its shipped head on this CPU: trees side by side in ONE process.

Held-out chat requests that the benchmarks do not measure (chat_prompts()[8:16]: bench_feature_head.py and README
command 1 use the first 8), batch 1, 128 new tokens, fp32, eager; every tree at draft_policy='fixed' with the
lookup branch at its default; rows interleaved per request (rotating order), `--repeats` times; each ratio against the
fastest target-only row of the same repeat, median over the repeats (bench_feature_head.run_group).

    python benchmarks/bench_tree_sweep.py --output benchmarks/results/tree_sweep_stage5.json
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from optimum_uag import assisted_generate, embedded_models
from optimum_uag.engine.drafters import load_feature_head
from optimum_uag.models import chat_prompts, smollm2
from optimum_uag.runners.packed import packed_weights

from bench_feature_head import run_group
from bench_smollm2 import load


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trees", default="3,2,5;3,3,6;4,2,6;4,3,8;4,4,12", help="depth,top_k,nodes;...")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--max_new_tokens", type=int, default=128)
    p.add_argument("--output", default=None)
    args = p.parse_args()
    target, tok = load(smollm2())
    head = load_feature_head(embedded_models()["smollm2_head"])
    greedy = dict(do_sample=False, pad_token_id=tok.pad_token_id)
    pack = packed_weights(target)

    def packed(enc, m):
        with pack:
            return target.generate(**enc, max_new_tokens=m, **greedy)

    def tree(d, k, n):
        return lambda enc, m: assisted_generate(target, head, enc["input_ids"], enc["attention_mask"],
                                                max_new_tokens=m, draft_policy="fixed", tree_depth=d, tree_top_k=k,
                                                tree_nodes=n, **greedy)

    shapes = [tuple(int(x) for x in s.split(",")) for s in args.trees.split(";")]
    rows = {"target-only": lambda enc, m: target.generate(**enc, max_new_tokens=m, **greedy),
            "target-only prepacked": packed, **{f"tree {s}": tree(*s) for s in shapes}}
    prompts = chat_prompts()[8:16]
    res = run_group("trees", rows, prompts, 1, args.max_new_tokens, tok, args.repeats)
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
    cpu = next((line.split(":", 1)[1].strip() for line in lscpu if line.startswith("Model name")), "unknown")
    for name, r in res["rows"].items():
        tau = f"{r['tau']:.2f}" if "tau" in r else "-"
        print(f"{name:<26}{r['tokens_per_s']:>7.1f}{r['speedup_vs_best_target_only']:>8.2f}x{tau:>6}"
              f"{str(r.get('exact', '-')):>7}")
    if args.output:
        out = {"date": time.strftime("%Y-%m-%d"), "model": "SmolLM2-135M-Instruct fp32, shipped smollm2_head, eager",
               "cpu": cpu, "max_new_tokens": args.max_new_tokens, "repeats": args.repeats,
               "prompts": "optimum_uag.models.chat_prompts()[8:16] (held out, not in the benchmarks)",
               "command": "python benchmarks/bench_tree_sweep.py " + " ".join(sys.argv[1:]),
               "held_out_chat": res}
        with open(args.output, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
