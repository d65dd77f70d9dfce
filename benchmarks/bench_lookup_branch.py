#!/usr/bin/env python
"""The prompt-lookup branch of the feature head's tree: beside the whole tree (a second verify bucket of nodes + lookup
columns) where the head endorses the n-gram continuation, against the replacement of the tree's weakest nodes.

SmolLM2-135M-Instruct with its shipped head, fp32, eager, batch 1, 128 new tokens, held-out chat and input-grounded
requests, rows interleaved per prompt (the order alternates), ratios against the prepacked target-only path measured
in the same run:

  replace      the branch replaces the tree's lowest-ranked nodes (at most nodes - top_k of them); one verify width
  endorse=1    beside the tree when its first token is the head's best token
  endorse=2    beside the tree when its first two tokens are the head's best token and that token's best child
               (the default, feature.BRANCH_ENDORSE)

Every variant keeps the branch at its first length (8), not continued periodically, as when the results were
measured (2026-12-05); benchmarks/bench_lookup_length.py measures the branch that grows.

    python benchmarks/bench_lookup_branch.py --output benchmarks/results/lookup_branch.json
"""
from __future__ import annotations

import argparse
import json
import time

import torch

from optimum_uag import assisted_generate, embedded_models
from optimum_uag.engine.drafters import combined, feature, load_feature_head
from optimum_uag.models import chat_prompts, smollm2
from optimum_uag.models.prompt_sets import grounded_chat_prompts
from optimum_uag.runners.packed import packed_weights

from bench_feature_head import encode
from bench_smollm2 import load

VARIANTS = {"replace": (0, None), "endorse=1": (None, 1), "endorse=2": (None, 2)}  # (branch_nodes, BRANCH_ENDORSE)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--max_new_tokens", type=int, default=128)
    p.add_argument("--output", default=None)
    args = p.parse_args()
    target, tok = load(smollm2())
    head = load_feature_head(embedded_models()["smollm2_head"])
    pack = packed_weights(target)
    greedy = dict(do_sample=False, pad_token_id=tok.pad_token_id)
    init, with_branch, endorse = feature.FeatureDrafter.__init__, feature._with_branch, feature.BRANCH_ENDORSE
    current = {"branch_nodes": None, "wide": 0}

    def drafter_init(self, *a, **k):
        init(self, *a, **k)
        if current["branch_nodes"] is not None:
            self.branch_nodes = current["branch_nodes"]
        self.branch_max = self.branch_nodes  # the branch does not grow (see the module doc)

    def counted(*a, **k):
        current["wide"] += 1
        return with_branch(*a, **k)

    feature.FeatureDrafter.__init__, feature._with_branch = drafter_init, counted
    combined.PERIODIC_BRANCH = False
    results = {}
    try:
        for group, prompts in (("chat@1", chat_prompts()[: args.prompts]),
                               ("grounded@1", grounded_chat_prompts()[: args.prompts])):
            rows = ["target-only prepacked", *VARIANTS]
            seconds = dict.fromkeys(rows, 0.0)
            stats = {v: {"tau": [], "tree_rounds": 0, "wide_rounds": 0, "exact": True} for v in VARIANTS}
            for i, prompt in enumerate(prompts):
                enc = encode(tok, [prompt])
                ref, outs = None, {}
                for row in rows[i % len(rows):] + rows[: i % len(rows)]:  # the order rotates from prompt to prompt
                    t0 = time.perf_counter()
                    if row == "target-only prepacked":
                        with pack:
                            ref = target.generate(**enc, max_new_tokens=args.max_new_tokens, **greedy)
                        seconds[row] += time.perf_counter() - t0
                        continue
                    current["branch_nodes"], endorse_tokens = VARIANTS[row]
                    feature.BRANCH_ENDORSE = endorse_tokens or endorse
                    current["wide"] = 0
                    out = assisted_generate(target, head, enc["input_ids"], enc["attention_mask"],
                                            max_new_tokens=args.max_new_tokens, **greedy)
                    seconds[row] += time.perf_counter() - t0
                    s = stats[row]
                    s["tau"].append(out.metrics.tau)
                    s["tree_rounds"] += out.metrics.tree_rounds
                    s["wide_rounds"] += current["wide"]
                    outs[row] = out.sequences
                for v in VARIANTS:  # every variant's output against target-only greedy on this prompt
                    stats[v]["exact"] &= torch.equal(outs[v], ref)
            base = seconds["target-only prepacked"]
            results[group] = {
                row: {"speedup_vs_prepacked_target_only": round(base / seconds[row], 3),
                      **({} if row not in VARIANTS else {
                          "tau": round(sum(stats[row]["tau"]) / len(stats[row]["tau"]), 3),
                          "wide_round_share": round(stats[row]["wide_rounds"] / max(1, stats[row]["tree_rounds"]), 3),
                          "exact": stats[row]["exact"]})}
                for row in rows}
            print(group, json.dumps(results[group]), flush=True)
    finally:
        feature.FeatureDrafter.__init__, feature._with_branch, feature.BRANCH_ENDORSE = init, with_branch, endorse
    if args.output:
        summary = {"date": time.strftime("%Y-%m-%d"), "model": "SmolLM2-135M-Instruct + smollm2_head", "dtype": "float32",
                   "prompts": args.prompts, "max_new_tokens": args.max_new_tokens, "repeats": 1,
                   "command": "python benchmarks/bench_lookup_branch.py --output benchmarks/results/lookup_branch.json",
                   "groups": results}
        with open(args.output, "w") as f:
            json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
