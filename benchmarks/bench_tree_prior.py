#!/usr/bin/env python
"""A/B of the adaptive policy's prior on a tree's rate (engine/policy.py TREE_PRIOR_ROUNDS / TREE_PRIOR_RATE): the
head's default tree + lookup branch under the adaptive policy with the prior, without it (the policy before), and
with a draft every round (draft_policy="fixed"). SmolLM2-135M-Instruct + its head, fp32, batch 1, held-out requests,
rows interleaved per request (bench_feature_head.run_group), median of the repeats, ratios against the fastest
target-only row.

    python benchmarks/bench_tree_prior.py --group chat --repeats 2 --output benchmarks/results/tree_prior.json
    python benchmarks/bench_tree_prior.py --group sample --repeats 2 --output benchmarks/results/tree_prior.json --merge
    python benchmarks/bench_tree_prior.py --group grounded --repeats 3 --priors 8:1.2 --tree_first both \
        --output benchmarks/results/tree_first.json
"""
from __future__ import annotations

import argparse

import optimum_uag.engine.policy as policy

from optimum_uag import assisted_generate

from bench_feature_head import ab_setup, add_ab_arguments, run_ab, target_only_rows


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--group", choices=("chat", "grounded", "sample"), default="chat")
    p.add_argument("--priors", default="8:1.2,0:1.2",
                   help="ROUNDS:RATE[:DECAY] of the adaptive rows (0 rounds: no prior; DECAY: the prior's weight's "
                        "factor per tree round, default 1)")
    p.add_argument("--tree_first", choices=("on", "off", "both"), default="off",
                   help="engine/policy.py TREE_FIRST for the adaptive rows (both: each prior twice, an A/B of the "
                        "start: a tree's first rounds draft and one round measures t0, or t0 first in two rounds)")
    add_ab_arguments(p)
    args = p.parse_args()
    target, tok, head, gen, prompts = ab_setup(args)

    def adaptive(rounds, rate, decay, tree_first):
        def run(enc, m):
            names = ("TREE_PRIOR_ROUNDS", "TREE_PRIOR_RATE", "TREE_PRIOR_DECAY", "TREE_FIRST")
            saved = [getattr(policy, n) for n in names]
            for n, v in zip(names, (rounds, rate, decay, tree_first)):
                setattr(policy, n, v)
            try:
                return assisted_generate(target, head, enc["input_ids"], enc["attention_mask"], max_new_tokens=m,
                                         **gen)
            finally:
                for n, v in zip(names, saved):
                    setattr(policy, n, v)
        return run

    rows = dict(target_only_rows(target, gen))
    for pair in args.priors.split(","):
        rounds, rate, decay = ([float(x) for x in pair.split(":")] + [1.0])[:3]
        name = f"head default, adaptive, prior {rounds:g} rounds at {rate:g}" if rounds else "head default, adaptive, no prior"
        if rounds and decay != 1.0:
            name += f", decaying x{decay:g} a tree round"
        for first in {"on": (True,), "off": (False,), "both": (True, False)}[args.tree_first]:
            rows[name + (", tree first" if first else "")] = adaptive(rounds, rate, decay, first)
    rows["head default, fixed policy"] = lambda enc, m: assisted_generate(
        target, head, enc["input_ids"], enc["attention_mask"], max_new_tokens=m, draft_policy="fixed", **gen)
    run_ab(rows, tok, args, f"{args.group}@1", prompts)

if __name__ == "__main__":
    main()
