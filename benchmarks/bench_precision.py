#!/usr/bin/env python
"""Greedy exactness by precision on the CPU/CUDA path: how often optimum-uag's output differs from the target's own
generate() in fp32, fp16 and bf16, beside transformers' own assisted generation (prompt lookup) on the same model.

Exactness is claimed for fp32. In bf16 a forward of several tokens rounds unlike one token's (and transformers' own
full forward of a sequence already differs from its incremental generate(): logits ~0.4 apart on SmolLM2), so a
near-tie between the two best tokens can flip at a verify and the continuations part from there: any speculative
decoder has this, transformers' included. This counts it on SmolLM2-135M-Instruct with its shipped head (the
default: tree + lookup branch) and with transformers' prompt-lookup assisted generate(), per prompt: identical to
the target's own greedy generate() of the same dtype, else the first new token that differs.

    python benchmarks/bench_precision.py --output benchmarks/results/precision_intel.json
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import torch

from bench_feature_head import cpu_name
from bench_gaudi_bf16 import first_difference, until_eos


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--max_new_tokens", type=int, default=64)
    p.add_argument("--output", default=None)
    args = p.parse_args()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from optimum_uag import assisted_generate
    from optimum_uag.engine.drafters import load_feature_head
    from optimum_uag.models import chat_prompts, embedded_models, smollm2

    path = smollm2()
    tok = AutoTokenizer.from_pretrained(path)
    eos = {tok.eos_token_id}
    prompts = chat_prompts()[: args.prompts]
    out = {"date": time.strftime("%Y-%m-%d"), "cpu": cpu_name(), "threads": torch.get_num_threads(),
           "model": "SmolLM2-135M-Instruct + its shipped head", "prompts": f"chat_prompts()[:{args.prompts}]",
           "max_new_tokens": args.max_new_tokens, "dtypes": {},
           "command": "python benchmarks/bench_precision.py " + " ".join(sys.argv[1:])}
    for name, dtype in (("float32", torch.float32), ("float16", torch.float16), ("bfloat16", torch.bfloat16)):
        target = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval()
        head = load_feature_head(embedded_models()["smollm2_head"])
        rows = {"optimum-uag (head default)": [], "transformers assisted (prompt lookup 8)": []}
        for q in prompts:
            enc = tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                          return_tensors="pt", return_dict=True)
            n = enc["input_ids"].shape[1]
            new = lambda seq: until_eos(seq[0, n:].tolist(), eos)  # noqa: E731
            with torch.no_grad():
                ref = new(target.generate(**enc, do_sample=False, max_new_tokens=args.max_new_tokens))
                ours = new(assisted_generate(target, head, enc["input_ids"], enc["attention_mask"],
                                             max_new_tokens=args.max_new_tokens, do_sample=False).sequences)
                hf = new(target.generate(**enc, do_sample=False, max_new_tokens=args.max_new_tokens,
                                         prompt_lookup_num_tokens=8))
            for row, got in zip(rows, (ours, hf)):
                rows[row].append(first_difference(got, ref))
        summary = {row: {"identical": sum(d is None for d in diffs), "prompts": len(diffs),
                         "first_difference": diffs} for row, diffs in rows.items()}
        out["dtypes"][name] = summary
        print(name, {row: f"{s['identical']}/{s['prompts']}" for row, s in summary.items()}, flush=True)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
