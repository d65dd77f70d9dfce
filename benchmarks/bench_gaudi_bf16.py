#!/usr/bin/env python
"""bf16 exactness on the Gaudi path: how often optimum-uag's greedy output differs from optimum-habana's own.

Exactness is claimed for fp32. In bf16, optimum-uag's verify runs K+1 query rows over the cache width, where
optimum-habana's target-only decode runs 1 row over its own cache: other GEMM / softmax shapes round
differently, so a near-tie between the two best tokens can flip, and the continuations diverge from there on.
This measures it on SmolLM2-135M-Instruct loaded as optimum-habana's GaudiLlamaForCausalLM under the HPU emulator
(CPU bf16 kernels: a Gaudi's bf16 GEMMs accumulate differently, so its rate is to be measured there; the
method and the script are the same): per prompt, optimum-habana's own static-shape greedy generate() (reuse_cache,
HPU graphs, lazy mode) vs optimum-uag's assisted generate() on the same Gaudi model, with the embedded distilled
draft (same tokenizer) and with prompt lookup. fp32 is the control: it must show no mismatch.

    python benchmarks/bench_gaudi_bf16.py [--prompts 16] [--max_new_tokens 64] [--output results/gaudi_bf16.json]
"""
from __future__ import annotations

import argparse
import json
import time

import torch


def until_eos(tokens: list[int], eos: set[int]) -> list[int]:
    """The tokens up to and including the first EOS: optimum-habana's static-shape generate() keeps writing after
    a row's EOS (up to max_new_tokens), transformers' and optimum-uag's stop there."""
    for i, t in enumerate(tokens):
        if t in eos:
            return tokens[: i + 1]
    return tokens


def first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--max_new_tokens", type=int, default=64)
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument("--output", default=None)
    args = parser.parse_args()

    from optimum_uag.testing.hpu_emulator import HPUEmulator

    with HPUEmulator():
        import optimum_uag.gaudi
        from optimum_uag import assisted_generate, embedded_models
        from optimum_uag.models import smollm2
        from optimum_uag.models.prompt_sets import heldout_chat_prompts

        optimum_uag.gaudi.enable()
        from transformers import AutoModelForCausalLM, AutoTokenizer

        path = smollm2()
        tokenizer = AutoTokenizer.from_pretrained(path)
        prompts = heldout_chat_prompts()[: args.prompts]
        results = {"model": "SmolLM2-135M-Instruct (GaudiLlamaForCausalLM, HPU emulator, CPU kernels)",
                   "max_new_tokens": args.max_new_tokens, "prompts": len(prompts), "rows": []}
        for dtype_name in args.dtypes:
            dtype = getattr(torch, dtype_name)
            target = AutoModelForCausalLM.from_pretrained(path, torch_dtype=dtype).eval()
            draft = AutoModelForCausalLM.from_pretrained(embedded_models()["smollm2_assistant"],
                                                         torch_dtype=dtype).eval()
            assert type(target).__module__.startswith("optimum.habana"), type(target)
            eos = target.generation_config.eos_token_id
            eos = set(eos if isinstance(eos, list) else [eos])
            methods = {"draft model (K=3)": dict(assistant_model=draft, num_assistant_tokens=3),
                       "prompt lookup (K=4)": dict(prompt_lookup_num_tokens=4),
                       # the control: optimum-habana's own loop against itself with other shapes (no static
                       # shapes: the cache grows by concatenation, attention over the live length only)
                       "control: upstream dynamic shapes": dict(upstream_dynamic=True)}
            counts = {name: {"rows_differing": 0, "tokens_compared": 0, "tokens_after_divergence": 0,
                             "first_divergence": []} for name in methods}
            start = time.perf_counter()
            for text in prompts:
                ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                                    return_tensors="pt")
                mask = torch.ones_like(ids)
                optimum_uag.disable()
                try:
                    own = target.generate(ids, attention_mask=mask, max_new_tokens=args.max_new_tokens,
                                          do_sample=False, lazy_mode=True, hpu_graphs=False, static_shapes=True,
                                          reuse_cache=True, ignore_eos=False)[0, ids.shape[1]:].tolist()
                finally:
                    optimum_uag.gaudi.enable()
                own = until_eos(own, eos)
                for name, kwargs in methods.items():
                    if kwargs.get("upstream_dynamic"):
                        optimum_uag.disable()
                        try:
                            ours = target.generate(ids, attention_mask=mask, max_new_tokens=args.max_new_tokens,
                                                   do_sample=False, lazy_mode=True, hpu_graphs=False,
                                                   static_shapes=False, reuse_cache=False, ignore_eos=False)
                        finally:
                            optimum_uag.gaudi.enable()
                        ours = until_eos(ours[0, ids.shape[1]:].tolist(), eos)
                    else:
                        ours = assisted_generate(target, kwargs.get("assistant_model"), ids, mask,
                                                 max_new_tokens=args.max_new_tokens, do_sample=False, lazy_mode=True,
                                                 **{k: v for k, v in kwargs.items() if k != "assistant_model"})
                        ours = until_eos(ours.sequences[0, ids.shape[1]:].tolist(), eos)
                    c = counts[name]
                    at = first_difference(own, ours)
                    c["tokens_compared"] += len(own)
                    if at is not None:
                        c["rows_differing"] += 1
                        c["first_divergence"].append(at)
                        c["tokens_after_divergence"] += len(own) - at
            for name, c in counts.items():
                row = {"dtype": dtype_name, "method": name, **c,
                       "row_mismatch_rate": c["rows_differing"] / len(prompts),
                       "token_mismatch_rate": c["tokens_after_divergence"] / max(1, c["tokens_compared"])}
                results["rows"].append(row)
                print(f"{dtype_name:9s} {name:20s} rows differing {c['rows_differing']}/{len(prompts)}  "
                      f"tokens after the first divergence {row['token_mismatch_rate']:.1%}  "
                      f"first divergence at {c['first_divergence']}", flush=True)
            print(f"  ({dtype_name}: {time.perf_counter() - start:.0f} s)", flush=True)
    if args.output:
        with open(args.output, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
