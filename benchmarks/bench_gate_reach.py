#!/usr/bin/env python
"""chat@4 A/B of the adaptive chain's ceiling: GATE_REACH 2 / 1 / 0 past the best fixed length (engine/policy.py),
the gate off at the best fixed length, and a fixed K=2 chain; SmolLM2-135M-Instruct + its head, fp32, batch 4, rows
interleaved per batch of prompts (bench_feature_head.run_group), median of the repeats, ratios against the prepacked
target-only row of the same run.

    python benchmarks/bench_gate_reach.py --prompts 16 --repeats 3 --output /tmp/gate_reach.json
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from optimum_uag import assisted_generate
from optimum_uag.engine import policy
from optimum_uag.models import chat_prompts

from bench_feature_head import cpu_name, print_rows, run_group, smollm2_with_head, target_only_rows, warm_up


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--max_new_tokens", type=int, default=128)
    p.add_argument("--output", default=None)
    args = p.parse_args()
    target, tok, head, greedy = smollm2_with_head()
    held = chat_prompts()

    def ours(reach=None, gate=True, **options):
        def fn(enc, m):
            old = policy.GATE_REACH, policy.AdaptivePolicy.gate
            if reach is not None:
                policy.GATE_REACH = reach
            if not gate:
                policy.AdaptivePolicy.gate = lambda self: None
            try:
                return assisted_generate(target, head, enc["input_ids"], enc["attention_mask"], max_new_tokens=m,
                                         **options, **greedy)
            finally:
                policy.GATE_REACH, policy.AdaptivePolicy.gate = old
        return fn

    rows = {**target_only_rows(target, greedy),
            "reach 2": ours(2), "reach 1": ours(1), "reach 0": ours(0), "gate off, reach 0": ours(0, gate=False),
            "fixed K=2": ours(num_assistant_tokens=2, prompt_lookup_num_tokens=0)}
    warm_up(rows, tok)
    res = run_group("chat@4", rows, held[: args.prompts], 4, args.max_new_tokens, tok, args.repeats)
    res["shipped_gate_reach"] = policy.GATE_REACH
    res.update(command="python benchmarks/bench_gate_reach.py " + " ".join(sys.argv[1:]), cpu=cpu_name(),
               date=time.strftime("%Y-%m-%d"))
    print_rows(res, 24)
    if args.output:
        with open(args.output, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
