#!/usr/bin/env python
"""Quality and cost of the embedded family, measured with transformers' own generate() (docs/models.md).

- tau of transformers 4.55 assisted generation (greedy, 64 new tokens, num_assistant_tokens=5, constant
  schedule) on 20 held-out prompts, counting the target's forward calls with a hook;
- cost ratios (fp32, batch 1, median of many): one draft forward / one target forward (one-token decode with
  a KV cache of ~100 tokens), and the target verifying 6 tokens / its 1-token forward.

    python benchmarks/eval_embedded.py [--prompts 20] [--repeats 50]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from transformers import DynamicCache

from optimum_uag import eval_prompts, load_embedded


def count_calls(model):
    calls = {"n": 0}
    handle = model.register_forward_hook(lambda *a: calls.__setitem__("n", calls["n"] + 1))
    return calls, handle


def hf_tau(target, tok, assistant, assistant_tok, prompts, cross: bool) -> dict:
    calls, handle = count_calls(target)
    new_tokens = 0
    assistant.generation_config.num_assistant_tokens = 5
    assistant.generation_config.num_assistant_tokens_schedule = "constant"
    assistant.generation_config.assistant_confidence_threshold = 0.0
    for prompt in prompts:
        enc = tok(prompt, return_tensors="pt", return_token_type_ids=False)
        kwargs = dict(tokenizer=tok, assistant_tokenizer=assistant_tok) if cross else {}
        out = target.generate(**enc, assistant_model=assistant, do_sample=False, max_new_tokens=64,
                              pad_token_id=tok.pad_token_id, **kwargs)
        new_tokens += out.shape[1] - enc["input_ids"].shape[1]
    handle.remove()
    return {"tau": new_tokens / calls["n"], "new_tokens": new_tokens, "target_calls": calls["n"]}


@torch.no_grad()
def forward_ms(model, context: int, width: int, repeats: int) -> float:
    ids = torch.randint(10, 200, (1, context))
    cache = DynamicCache()
    model(ids, past_key_values=cache, use_cache=True)
    step = torch.randint(10, 200, (1, width))
    times = []
    for _ in range(repeats):
        cache.crop(context)
        t0 = time.perf_counter()
        model(step, past_key_values=cache, use_cache=True)
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args()
    target, tok = load_embedded("target")
    same, same_tok = load_embedded("assistant_same_tokenizer")
    cross, cross_tok = load_embedded("assistant")
    prompts = eval_prompts()[: args.prompts]
    report = {
        "same_tokenizer": hf_tau(target, tok, same, same_tok, prompts, cross=False),
        "cross_tokenizer": hf_tau(target, tok, cross, cross_tok, prompts, cross=True),
    }
    t1 = forward_ms(target, 100, 1, args.repeats)
    t6 = forward_ms(target, 100, 6, args.repeats)
    report["cost_ms"] = {
        "target_1": t1, "target_6": t6, "same_draft_1": forward_ms(same, 100, 1, args.repeats),
        "cross_draft_1": forward_ms(cross, 100, 1, args.repeats),
    }
    report["ratios"] = {
        "same_draft_over_target": report["cost_ms"]["same_draft_1"] / t1,
        "cross_draft_over_target": report["cost_ms"]["cross_draft_1"] / t1,
        "verify6_over_target1": t6 / t1,
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    torch.manual_seed(0)
    main()
