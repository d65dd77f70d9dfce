#!/usr/bin/env python
"""SmolLM2-135M-Instruct's verify cost curve on this CPU: one forward of W tokens against one of 1 token, on the
runner optimum-uag verifies with (the prepacked static runner), the widths interleaved, median of the repetitions
(runners/cost.py `verify_cost`), at every width from 1 to 9 and a few wider: where the curve steps decides which
default tree pays here (engine/config.py DEVICE_TREES).

    python benchmarks/bench_verify_cost.py --output benchmarks/results/verify_cost_intel.json
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import torch

from optimum_uag.runners.cost import verify_cost

from bench_feature_head import cpu_name
from bench_smollm2 import load


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--widths", default="2,3,4,5,6,7,8,9,12,17")
    p.add_argument("--context", type=int, default=250)
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--runs", type=int, default=2, help="the whole curve this many times (each printed)")
    p.add_argument("--output", default=None)
    args = p.parse_args()
    from optimum_uag.models import smollm2

    target, _ = load(smollm2())
    widths = tuple(int(w) for w in args.widths.split(","))
    runs = [verify_cost(target, widths, context=args.context, reps=args.reps) for _ in range(args.runs)]
    for run in runs:
        print(" ".join(f"W={w}: {v:.2f}" for w, v in run["relative"].items()))
    out = {"date": time.strftime("%Y-%m-%d"), "cpu": cpu_name(), "threads": torch.get_num_threads(),
           "model": "SmolLM2-135M-Instruct fp32, the prepacked static runner", "runs": runs,
           "command": "python benchmarks/bench_verify_cost.py " + " ".join(sys.argv[1:])}
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
