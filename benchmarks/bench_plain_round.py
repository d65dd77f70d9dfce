#!/usr/bin/env python
"""What a round without a draft costs in optimum-uag's loop against the fastest target-only path (the prepacked
`generate()`): SmolLM2-135M-Instruct with its feature head, the adaptive policy forced to draft nothing, so every round
is the target's own decoding step on our static cache. Interleaved per prompt, repeated, median of the ratios.

    python benchmarks/bench_plain_round.py --output benchmarks/results/plain_round.json
"""
from __future__ import annotations

import argparse
import copy
import json
import statistics
import time

import torch

from optimum_uag import assisted_generate, embedded_models
from optimum_uag.engine.drafters import load_feature_head
from optimum_uag.engine.policy import AdaptivePolicy
from optimum_uag.models import chat_prompts, smollm2
from optimum_uag.runners.packed import packed_weights

from bench_feature_head import encode
from bench_smollm2 import load


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompts", type=int, default=3)
    p.add_argument("--max_new_tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--output", default=None)
    args = p.parse_args()
    AdaptivePolicy._choose = lambda self: 0  # every round without a draft (the measurement's whole point)
    target, tok = load(smollm2())
    head = load_feature_head(embedded_models()["smollm2_head"])
    pack = packed_weights(target)
    prompts, n = chat_prompts(), args.max_new_tokens
    out = {"date": time.strftime("%Y-%m-%d"), "model": "SmolLM2-135M-Instruct", "dtype": "float32",
           "max_new_tokens": n, "prompts": args.prompts, "repeats": args.repeats,
           "command": "python benchmarks/bench_plain_round.py --output benchmarks/results/plain_round.json"}
    for batch in (1, 4):
        encs = [encode(tok, prompts[i * batch:(i + 1) * batch]) for i in range(args.prompts)]

        config = copy.deepcopy(target.generation_config)  # one explicit config: transformers' fastest call
        config.update(max_new_tokens=n, do_sample=False, pad_token_id=tok.pad_token_id, eos_token_id=None)

        def packed(enc):
            with pack:
                return target.generate(**enc, generation_config=config)

        def plain(enc):
            return assisted_generate(target, head, enc["input_ids"], enc["attention_mask"], max_new_tokens=n,
                                     draft_policy="adaptive", eos_token_id=None).sequences

        for f in (packed, plain):
            f(encs[0])
        ratios, exact = [], True
        for rep in range(args.repeats):
            for enc in encs:
                times = {}
                for name, f in ((("packed", packed), ("plain", plain)) if rep % 2 == 0 else
                                (("plain", plain), ("packed", packed))):
                    t0 = time.perf_counter()
                    times[name] = (f(enc), time.perf_counter() - t0)
                ratios.append(times["packed"][1] / times["plain"][1])
                exact &= torch.equal(times["packed"][0], times["plain"][0])
        out[f"batch_{batch}"] = {"plain_round_speed_vs_prepacked_generate": statistics.median(ratios),
                                 "ratios": [round(r, 4) for r in ratios], "exact": exact}
        print(f"batch {batch}: a round without a draft runs at {statistics.median(ratios):.3f}x the prepacked "
              f"generate() step (exact: {exact})", flush=True)
    if args.output:
        with open(args.output, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
