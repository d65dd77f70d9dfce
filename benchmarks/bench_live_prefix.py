#!/usr/bin/env python
"""The static runner's forward over the live prefix of its cache against the whole capacity, and transformers' own
one-token step on its dynamic cache, SmolLM2-135M-Instruct on its prepacked CPU weights (fp32, eager).

A block of W tokens per row at `--context` tokens of cache, in a cache of `--capacity` slots (a call with a long
max_new_tokens, early in the call); the two runner modes alternate call by call, median of `--reps`.

    python benchmarks/bench_live_prefix.py --output benchmarks/results/live_prefix.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from optimum_uag.models import smollm2
from optimum_uag.runners.packed import packed_weights
from optimum_uag.runners.registry import make_runner

from bench_smollm2 import load


@torch.inference_mode()
def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--context", type=int, default=200)
    p.add_argument("--capacity", type=int, default=450)
    p.add_argument("--widths", default="1,2,6,9,14")
    p.add_argument("--batches", default="1,4")
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--output", default=None)
    args = p.parse_args()
    target, _ = load(smollm2())
    gen = torch.Generator().manual_seed(0)
    results = {}
    with packed_weights(target):
        for batch in (int(b) for b in args.batches.split(",")):
            runners = {}
            for mode in ("live prefix", "whole width"):
                runners[mode] = make_runner(target, batch, args.capacity, torch.zeros(batch, dtype=torch.long))
                runners[mode].live_prefix = mode == "live prefix"
                runners[mode].forward(torch.randint(0, 40000, (batch, args.context), generator=gen),
                                      torch.zeros(batch, dtype=torch.long))
            start = torch.full((batch,), args.context)
            rows = {}
            for width in (int(w) for w in args.widths.split(",")):
                x = torch.randint(0, 40000, (batch, width), generator=gen)
                times = {mode: [] for mode in runners}
                for rep in range(args.reps + 2):
                    for mode, runner in runners.items():
                        t0 = time.perf_counter()
                        runner.forward(x, start, logits_to_keep=width, hidden=True)
                        if rep >= 2:
                            times[mode].append(time.perf_counter() - t0)
                ms = {mode: statistics.median(t) * 1e3 for mode, t in times.items()}
                rows[width] = {**{f"{m}_ms": round(v, 2) for m, v in ms.items()},
                               "whole / live": round(ms["whole width"] / ms["live prefix"], 3)}
            ids = torch.randint(0, 40000, (batch, args.context), generator=gen)
            past = target(ids, use_cache=True).past_key_values
            steps = []
            for i in range(args.reps + 2):
                t0 = time.perf_counter()
                target(ids[:, :1], past_key_values=past, use_cache=True, logits_to_keep=1,
                       attention_mask=torch.ones(batch, args.context + 1 + i, dtype=torch.long))
                steps.append(time.perf_counter() - t0)
            results[f"batch {batch}"] = {"widths": rows,
                                         "transformers_dynamic_cache_step_ms": round(statistics.median(steps[2:]) * 1e3, 2)}
            print(batch, json.dumps(results[f"batch {batch}"]), flush=True)
    if args.output:
        import subprocess

        lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
        cpu = next((line.split(":", 1)[1].strip() for line in lscpu if line.startswith("Model name")), "unknown")
        with open(args.output, "w") as f:
            json.dump({"date": time.strftime("%Y-%m-%d"), "cpu": cpu, "context": args.context,
                       "capacity": args.capacity, "reps": args.reps,
                       "command": "python benchmarks/bench_live_prefix.py --output benchmarks/results/live_prefix.json",
                       "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
