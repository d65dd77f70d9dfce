#!/usr/bin/env python
"""A/B of grouped-query attention without key / value copies on a CPU (runners/static.py `masked_gqa`, the feature
head's `enable_gqa`): the default draft with them and with transformers' / the head's copies back, chat at batch 1
and 4, SmolLM2-135M-Instruct + its head, fp32, rows interleaved per batch of prompts (bench_feature_head.run_group),
median of the repeats, ratios against the prepacked target-only row of the same run. Outputs are checked equal.

    python benchmarks/bench_gqa_copies.py --repeats 2 --output /tmp/gqa_copies.json
"""
from __future__ import annotations

import argparse
import contextlib
import json

from optimum_uag import assisted_generate
from optimum_uag.engine.drafters import feature_head
from optimum_uag.models import chat_prompts
from optimum_uag.runners import static

from bench_feature_head import run_group, smollm2_with_head, target_only_rows, warm_up


@contextlib.contextmanager
def copies():
    """transformers' repeat_kv in the static runner's masked blocks and repeat_interleave in the head, as before."""
    enter, gqa = static.masked_gqa.__enter__, feature_head._SDPA_GQA
    static.masked_gqa.__enter__, feature_head._SDPA_GQA = (lambda self: self), False
    try:
        yield
    finally:
        static.masked_gqa.__enter__, feature_head._SDPA_GQA = enter, gqa


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--max_new_tokens", type=int, default=128)
    p.add_argument("--output", default=None)
    args = p.parse_args()
    target, tok, head, greedy = smollm2_with_head()
    held = chat_prompts()

    def ours(with_copies):
        def fn(enc, m):
            with copies() if with_copies else contextlib.nullcontext():
                return assisted_generate(target, head, enc["input_ids"], enc["attention_mask"], max_new_tokens=m,
                                         **greedy)
        return fn

    rows = {**target_only_rows(target, greedy),
            "head default": ours(False), "head default, key/value copies": ours(True)}
    warm_up(rows, tok)
    results = {}
    for batch in (1, 4):
        name = f"chat@{batch}"
        res = run_group(name, rows, held[: args.prompts], batch, args.max_new_tokens, tok, args.repeats)
        results[name] = res
        r = res["rows"]
        print(f"{name}: without copies / with copies = "
              f"{r['head default']['tokens_per_s'] / r['head default, key/value copies']['tokens_per_s']:.3f}")
    if args.output:
        with open(args.output, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
