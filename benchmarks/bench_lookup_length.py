#!/usr/bin/env python
"""A/B of the lookup branch's length beside the head's tree (`prompt_lookup_num_tokens`, default 8 for a feature
head): SmolLM2-135M-Instruct + its head, fp32, batch 1, held-out input-grounded (or chat) requests, rows interleaved
per request (bench_feature_head.run_group), median of the repeats, ratios against the prepacked target-only row.
`--lookups` gives fixed lengths; `--grow_to` rows leave the length unset, so the default branch starts at 8 and
doubles after a round that accepted it whole, up to the given cap (config.HEAD_LOOKUP_MAX_TOKENS, 8 = never grows).

    python benchmarks/bench_lookup_length.py --group grounded --lookups 8,12,16 --repeats 2
    python benchmarks/bench_lookup_length.py --group grounded --lookups 16 --grow_to 8,16,32 --repeats 2
    python benchmarks/bench_lookup_length.py --group grounded --lookups '' --grow_to 8,32 --periodic on,off
"""
from __future__ import annotations

import argparse

import optimum_uag.engine.config as engine_config
import optimum_uag.engine.drafters.combined as combined
import optimum_uag.engine.drafters.feature as feature

from optimum_uag import assisted_generate
from optimum_uag.models import chat_prompts
from optimum_uag.models.prompt_sets import grounded_chat_prompts

from bench_feature_head import print_rows, run_group, smollm2_with_head, target_only_rows, warm_up, write_group


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--group", choices=("grounded", "chat"), default="grounded")
    p.add_argument("--lookups", default="8,12,16", help="fixed lengths (prompt_lookup_num_tokens); '' for none")
    p.add_argument("--grow_to", default="", help="caps of the default, growing branch ('' for none)")
    p.add_argument("--periodic", default="on", help="'on', 'off' or 'on,off': the growing rows with the branch "
                   "continued periodically past a row's end (combined.PERIODIC_BRANCH), without, or both")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--max_new_tokens", type=int, default=128)
    p.add_argument("--from_prompt", action="store_true", help="also each growing row with growth only after "
                   "copies of the request (feature.GROW_FROM_PROMPT_ONLY)")
    p.add_argument("--output", default=None)
    p.add_argument("--merge", action="store_true", help="add this run's group to the --output file's groups")
    args = p.parse_args()
    target, tok, head, greedy = smollm2_with_head()
    prompts = (grounded_chat_prompts() if args.group == "grounded" else chat_prompts())[: args.prompts]

    def ours(lookup):
        return lambda enc, m: assisted_generate(target, head, enc["input_ids"], enc["attention_mask"],
                                                max_new_tokens=m, prompt_lookup_num_tokens=lookup, **greedy)

    def growing(cap, periodic, from_prompt=False):
        def run(enc, m):
            saved = engine_config.HEAD_LOOKUP_MAX_TOKENS, combined.PERIODIC_BRANCH, feature.GROW_FROM_PROMPT_ONLY
            engine_config.HEAD_LOOKUP_MAX_TOKENS, combined.PERIODIC_BRANCH = cap, periodic
            feature.GROW_FROM_PROMPT_ONLY = from_prompt
            try:
                return ours(None)(enc, m)
            finally:
                engine_config.HEAD_LOOKUP_MAX_TOKENS, combined.PERIODIC_BRANCH, feature.GROW_FROM_PROMPT_ONLY = saved
        return run

    rows = {**target_only_rows(target, greedy),
            **{f"head default, lookup {n}": ours(int(n)) for n in args.lookups.split(",") if n},
            **{f"head default, grows to {n}" + ("" if on == "on" else ", not periodic"): growing(int(n), on == "on")
               for n in args.grow_to.split(",") if n for on in args.periodic.split(",")},
            **{f"head default, grows to {n}, from the request only" + ("" if on == "on" else ", not periodic"):
               growing(int(n), on == "on", True)
               for n in (args.grow_to.split(",") if args.from_prompt else ()) if n and int(n) > 8
               for on in args.periodic.split(",")}}
    warm_up(rows, tok)
    res = run_group(f"{args.group}@1", rows, prompts, 1, args.max_new_tokens, tok, args.repeats)
    print_rows(res, 40)
    if args.output:
        write_group(args.output, f"{args.group}@1", res, args.merge, cpu=False)

if __name__ == "__main__":
    main()
