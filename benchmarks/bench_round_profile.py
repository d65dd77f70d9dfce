#!/usr/bin/env python
"""Where a drafting round's time goes: SmolLM2-135M-Instruct + its shipped head, the default (device-chosen tree +
lookup branch, adaptive policy), batch 1, chat requests, 128 new tokens, fp32, eager. Each stage's wall time per
target call (one round), measured by timing the engine's own methods during real calls (wrapped for this script
only), beside the fastest target-only path's time per token (transformers' generate() on the prepacked weights),
the two interleaved per request.

    python benchmarks/bench_round_profile.py --output benchmarks/results/round_profile_intel.json
"""
from __future__ import annotations

import argparse
import collections
import json
import time

from optimum_uag import assisted_generate
from optimum_uag.engine import verify
from optimum_uag.engine.drafters import combined, feature, feature_head
from optimum_uag.models import chat_prompts
from optimum_uag.runners import static
from optimum_uag.runners.packed import packed_weights

from bench_feature_head import cpu_name, encode, smollm2_with_head

STAGES = {  # label: (class, method)
    "draft (lookup + head)": (combined.LookupThenDraft, "propose"),
    "  head step": (feature_head.FeatureHead, "step"),
    "  head logits": (feature_head.FeatureHead, "logits"),
    "verify": (verify.Verifier, "__call__"),
    "  target forward (runner)": (static.StaticCacheRunner, "forward"),
    "  keep the path's keys / values": (static.StaticCacheRunner, "keep_path"),
}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--output", default=None)
    args = p.parse_args()
    target, tok, head, greedy = smollm2_with_head()
    pack = packed_weights(target)
    seconds, calls = collections.Counter(), collections.Counter()
    for label, (cls, name) in STAGES.items():
        original = getattr(cls, name)

        def timed(*a, _f=original, _label=label, **k):
            t0 = time.perf_counter()
            try:
                return _f(*a, **k)
            finally:
                seconds[_label] += time.perf_counter() - t0
                calls[_label] += 1
        setattr(cls, name, timed)

    def ours(enc):
        return assisted_generate(target, head, enc["input_ids"], enc["attention_mask"], max_new_tokens=128, **greedy)

    def target_only(enc):
        with pack:
            return target.generate(**enc, max_new_tokens=128, **greedy)

    ours(encode(tok, chat_prompts()[-1:]))  # warm-up (and the device's tree choice)
    target_only(encode(tok, chat_prompts()[-1:]))
    seconds.clear(), calls.clear()
    total = {"ours": 0.0, "target": 0.0}
    rounds = tokens = target_tokens = 0
    for _ in range(args.repeats):
        for q in chat_prompts()[: args.prompts]:
            enc = encode(tok, [q])
            t0 = time.perf_counter()
            out = ours(enc)
            total["ours"] += time.perf_counter() - t0
            rounds += out.metrics.target_calls
            tokens += out.metrics.generated_tokens
            t0 = time.perf_counter()
            ref = target_only(enc)
            total["target"] += time.perf_counter() - t0
            target_tokens += ref.shape[1] - enc["input_ids"].shape[1]
    step = total["target"] / target_tokens
    stages = {label: {"ms_per_round": round(seconds[label] / rounds * 1e3, 3),
                      "calls_per_round": round(calls[label] / rounds, 3),
                      "share_of_a_target_only_step": round(seconds[label] / rounds / step, 3)} for label in STAGES}
    res = {"date": time.strftime("%Y-%m-%d"), "cpu": cpu_name(), "prompts": args.prompts, "repeats": args.repeats,
           "max_new_tokens": 128, "rounds": rounds, "tau": round(tokens / rounds, 3),
           "round_ms": round(total["ours"] / rounds * 1e3, 3),
           "target_only_step_ms": round(step * 1e3, 3),
           "round_in_target_only_steps": round(total["ours"] / rounds / step, 3),
           "stages": stages,
           "command": "python benchmarks/bench_round_profile.py "
                      + (f"--output {args.output}" if args.output else "")}
    print(f"a round {res['round_ms']:.1f} ms = {res['round_in_target_only_steps']:.2f} target-only steps "
          f"({res['target_only_step_ms']:.1f} ms), tau {res['tau']:.2f}")
    for label, row in stages.items():
        print(f"{label:<36}{row['ms_per_round']:8.2f} ms{row['share_of_a_target_only_step']:8.3f} of a step"
              f"{row['calls_per_round']:7.2f} calls")
    if args.output:
        with open(args.output, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
