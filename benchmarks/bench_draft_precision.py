#!/usr/bin/env python
"""A/B of the feature head's weight precision on a CPU (runners/packed.py `packed_weights(head, bf16=True)`, the
default): the head's linears on the skinny kernel with bfloat16 weights (half the bytes a draft step streams) against
float32 weights under the measured policy (OPTIMUM_UAG_DRAFT_BF16=0). SmolLM2-135M-Instruct + its head, fp32 target,
batch 1, held-out requests, the default draft (tree + lookup branch, adaptive) and the same with a draft every round,
rows interleaved per request (bench_feature_head.run_group), median of the repeats, ratios against the fastest
target-only row. The head's step is also timed alone (its catch-up of one pair and its logits, both precisions
alternating).

    python benchmarks/bench_draft_precision.py --group chat --output benchmarks/results/draft_precision.json
    python benchmarks/bench_draft_precision.py --group sample --output benchmarks/results/draft_precision.json --merge
"""
from __future__ import annotations

import argparse
import contextlib
import os

from optimum_uag import assisted_generate

from bench_feature_head import ab_setup, add_ab_arguments, run_ab, target_only_rows


@contextlib.contextmanager
def draft_precision(bf16: bool):
    saved = os.environ.get("OPTIMUM_UAG_DRAFT_BF16")
    os.environ["OPTIMUM_UAG_DRAFT_BF16"] = "1" if bf16 else "0"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("OPTIMUM_UAG_DRAFT_BF16")
        else:
            os.environ["OPTIMUM_UAG_DRAFT_BF16"] = saved


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--group", choices=("chat", "grounded", "sample"), default="chat")
    add_ab_arguments(p)
    args = p.parse_args()
    target, tok, head, gen, prompts = ab_setup(args)

    def row(bf16: bool, **options):
        def run(enc, m):
            with draft_precision(bf16):
                return assisted_generate(target, head, enc["input_ids"], enc["attention_mask"], max_new_tokens=m,
                                         **options, **gen)
        return run

    rows = dict(target_only_rows(target, gen))
    rows["head default, bf16 head"] = row(True)
    rows["head default, float32 head"] = row(False)
    rows["head default, fixed policy, bf16 head"] = row(True, draft_policy="fixed")
    rows["head default, fixed policy, float32 head"] = row(False, draft_policy="fixed")
    run_ab(rows, tok, args, f"{args.group}@1", prompts)


if __name__ == "__main__":
    main()
