#!/usr/bin/env python
"""A/B of the lookup branch's length beside the head's tree (`prompt_lookup_num_tokens`, default 8 for a feature
head): SmolLM2-135M-Instruct + its head, fp32, batch 1, held-out input-grounded (or chat) requests, rows interleaved
per request (bench_feature_head.run_group), median of the repeats, ratios against the prepacked target-only row.

    python benchmarks/bench_lookup_length.py --group grounded --lookups 8,12,16 --repeats 2
"""
from __future__ import annotations

import argparse
import json

from optimum_uag import assisted_generate, embedded_models
from optimum_uag.engine.drafters import load_feature_head
from optimum_uag.models import chat_prompts, smollm2
from optimum_uag.models.prompt_sets import grounded_chat_prompts

from bench_feature_head import encode, run_group, target_only_rows
from bench_smollm2 import load


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--group", choices=("grounded", "chat"), default="grounded")
    p.add_argument("--lookups", default="8,12,16")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--max_new_tokens", type=int, default=128)
    p.add_argument("--output", default=None)
    args = p.parse_args()
    target, tok = load(smollm2())
    head = load_feature_head(embedded_models()["smollm2_head"])
    prompts = (grounded_chat_prompts() if args.group == "grounded" else chat_prompts())[: args.prompts]
    greedy = dict(do_sample=False, pad_token_id=tok.pad_token_id)

    def ours(lookup):
        return lambda enc, m: assisted_generate(target, head, enc["input_ids"], enc["attention_mask"],
                                                max_new_tokens=m, prompt_lookup_num_tokens=lookup, **greedy)

    rows = {**target_only_rows(target, greedy),
            **{f"head default, lookup {n}": ours(int(n)) for n in args.lookups.split(",")}}
    warm = encode(tok, chat_prompts()[-1:])
    for fn in rows.values():
        fn(warm, 8)
    res = run_group(f"{args.group}@1", rows, prompts, 1, args.max_new_tokens, tok, args.repeats)
    for name, row in res["rows"].items():
        print(f"{name:<28}{row['tokens_per_s']:7.1f} tok/s {row['speedup_vs_best_target_only']:6.3f}x "
              f"{row['speedup_vs_best_target_only_per_repeat']} tau {row.get('tau', float('nan')):.2f}")
    if args.output:
        with open(args.output, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
