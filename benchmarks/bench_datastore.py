#!/usr/bin/env python
"""A/B of the lookup branch's source beside the head's tree: the row's own prompt and output (prompt lookup) alone,
or also a datastore of SmolLM2's own answers to other requests (drafters/datastore.py, REST-style retrieval) where the
row has no n-gram match of its own (`fallback`) or a shorter one (`longer`; `-endorsed`: a datastore continuation is
only verified whole beside the tree where the head endorses it, never in place of the tree's weakest nodes).
SmolLM2-135M-Instruct + its head, fp32, batch 1, held-out requests, rows interleaved per request
(bench_feature_head.run_group), median of the repeats, ratios against the fastest target-only row.

    python examples/answer_smollm2.py --pool head --output W/head.jsonl --minutes 20
    python benchmarks/bench_datastore.py --answers W/head.jsonl --group chat --repeats 2
    python benchmarks/bench_datastore.py --answers W/head.jsonl --group chat --repeats 1 --draft_policy fixed
"""
from __future__ import annotations

import argparse

import optimum_uag.engine.drafters.combined as combined

from optimum_uag import assisted_generate
from optimum_uag.cli.train_draft import read_records, token_sequences
from optimum_uag.engine.drafters.datastore import Datastore, answer_spans
from optimum_uag.models import chat_prompts
from optimum_uag.models.prompt_sets import grounded_chat_prompts

from bench_feature_head import add_ab_arguments, run_ab, smollm2_with_head, target_only_rows


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--group", choices=("grounded", "chat"), default="chat")
    p.add_argument("--answers", action="append", required=True,
                   help="answer files ({'prompt', 'answer'} lines, examples/answer_smollm2.py), repeatable")
    p.add_argument("--draft_policy", default=None, help="'fixed': every round drafts (tau without the adaptive "
                   "policy's choices); default: the adaptive policy")
    p.add_argument("--policies", default="fallback,longer,longer-endorsed",
                   help="datastore rows: combined.DATASTORE_POLICY, '-endorsed': DATASTORE_REPLACES off")
    p.add_argument("--max_ngram", type=int, default=4)
    p.add_argument("--offset", type=int, default=0, help="first request of the group")
    add_ab_arguments(p)
    args = p.parse_args()
    target, tok, head, greedy = smollm2_with_head()
    records = read_records(args.answers, None)
    store = Datastore(answer_spans(token_sequences(records, tok, "text", 10**6)), max_ngram=args.max_ngram)
    print(f"datastore: {len(store)} tokens, n-grams {store.min_ngram}..{store.max_ngram}", flush=True)
    group = grounded_chat_prompts() if args.group == "grounded" else chat_prompts()
    prompts = group[args.offset : args.offset + args.prompts]

    def row(policy):
        def run(enc, m):
            saved = head.datastore, combined.DATASTORE_POLICY, combined.DATASTORE_REPLACES
            head.datastore = store if policy else None
            combined.DATASTORE_POLICY = policy.split("-")[0] if policy else None
            combined.DATASTORE_REPLACES = not (policy or "").endswith("-endorsed")
            try:
                return assisted_generate(target, head, enc["input_ids"], enc["attention_mask"], max_new_tokens=m,
                                         draft_policy=args.draft_policy, **greedy)
            finally:
                head.datastore, combined.DATASTORE_POLICY, combined.DATASTORE_REPLACES = saved
        return run

    rows = {**target_only_rows(target, greedy), "head default, no datastore": row(None),
            **{f"head default, datastore {policy}": row(policy) for policy in args.policies.split(",") if policy}}
    run_ab(rows, tok, args, f"{args.group}@1", prompts, 36,
           key=f"{args.group}@1" + (f", {args.draft_policy} policy" if args.draft_policy else ""),
           datastore_tokens=len(store), answers=len(records), draft_policy=args.draft_policy or "adaptive")

if __name__ == "__main__":
    main()
