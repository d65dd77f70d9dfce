#!/usr/bin/env python
"""Side-by-side throughput on the embedded pair, in ONE process: target-only, transformers' assisted
generation (batch 1), and optimum-uag (batch 1 and batch N). Ratios, not absolute times.

    python benchmarks/bench_assisted.py --draft same    # classic assisted generation (same tokenizer)
    python benchmarks/bench_assisted.py --draft cross   # Universal Assisted Generation (different tokenizer)
    python benchmarks/bench_assisted.py --draft cross --do_sample
"""
from __future__ import annotations

import argparse
import copy
import json
import time

import torch

from optimum_uag import assisted_generate, eval_prompts, load_embedded


def run(fn, repeats):
    best = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        dt = time.perf_counter() - t0
        best = (dt, out) if best is None or dt < best[0] else best
    return best


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--draft", choices=["same", "cross"], default="same")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--max_new_tokens", type=int, default=64)
    p.add_argument("--num_assistant_tokens", type=int, default=5)
    p.add_argument("--batch_sizes", default="1,4,8")
    p.add_argument("--do_sample", action="store_true")
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--repeats", type=int, default=1, help="best-of-N per measurement")
    args = p.parse_args()

    target, tok = load_embedded("target")
    draft, draft_tok = load_embedded("assistant_same_tokenizer" if args.draft == "same" else "assistant")
    cross = args.draft == "cross"
    prompts = eval_prompts()[: args.prompts]
    gen = dict(max_new_tokens=args.max_new_tokens, do_sample=args.do_sample, pad_token_id=tok.pad_token_id,
               eos_token_id=None)  # fixed length: every method generates the same number of tokens
    if args.do_sample:
        gen.update(temperature=args.temperature, top_k=0)
    uag = dict(tokenizer=tok, assistant_tokenizer=draft_tok) if cross else {}
    rows = {}

    def tokens_per_s(name, fn_for_batch, batch):
        total_t, total_n, metrics, outs = 0.0, 0, [], []
        for i in range(0, len(prompts) - batch + 1, batch):
            enc = tok(prompts[i : i + batch], return_tensors="pt", padding=True, return_token_type_ids=False)
            torch.manual_seed(i)
            dt, out = run(lambda: fn_for_batch(enc), args.repeats)
            seqs = out.sequences if hasattr(out, "sequences") else out
            total_t += dt
            total_n += (seqs.shape[1] - enc["input_ids"].shape[1]) * seqs.shape[0]
            if hasattr(out, "metrics"):
                metrics.append(out.metrics)
            outs.append(seqs)
        rows[(name, batch)] = {"tok_s": total_n / total_t, "metrics": metrics, "outs": outs}

    def target_only(enc):
        return target.generate(**enc, **gen)

    # transformers' cross-tokenizer sampling (USD) replaces the assistant's LM head in place: give it a copy
    hf_draft = copy.deepcopy(draft) if (cross and args.do_sample) else draft

    def hf_assisted(enc):
        draft = hf_draft
        draft.generation_config.num_assistant_tokens = args.num_assistant_tokens
        draft.generation_config.num_assistant_tokens_schedule = "constant"
        draft.generation_config.assistant_confidence_threshold = 0.0
        return target.generate(**enc, assistant_model=draft, **uag, **gen)

    def ours(enc):
        return assisted_generate(target, draft, enc["input_ids"], enc["attention_mask"], **uag, **gen,
                                 num_assistant_tokens=args.num_assistant_tokens)

    # warm-up
    enc = tok(prompts[:1], return_tensors="pt", return_token_type_ids=False)
    target_only(enc), hf_assisted(enc), ours(enc)
    batches = [int(b) for b in args.batch_sizes.split(",")]
    for batch in batches:
        tokens_per_s("target-only", target_only, batch)
        if batch == 1:
            tokens_per_s("transformers assisted", hf_assisted, batch)
        tokens_per_s("optimum-uag", ours, batch)

    mode = "sampling (T=%.1f)" % args.temperature if args.do_sample else "greedy"
    print(f"\nembedded pair, draft={args.draft} ({'different' if cross else 'same'} tokenizer), {mode}, "
          f"{args.prompts} held-out prompts, {args.max_new_tokens} new tokens, K={args.num_assistant_tokens}")
    print(f"{'method':<24}{'batch':>6}{'tok/s ratio':>14}{'vs HF assist':>14}{'tau':>7}{'accept':>8}{'translate':>11}{'exact':>7}")
    summary = {}
    for batch in batches:
        base = rows[("target-only", batch)]["tok_s"]
        for name in ("target-only", "transformers assisted", "optimum-uag"):
            if (name, batch) not in rows:
                continue
            r = rows[(name, batch)]
            ratio = r["tok_s"] / base
            vs_hf = r["tok_s"] / rows[("transformers assisted", 1)]["tok_s"] if batch == 1 and name != "target-only" else None
            tau = acc = share = None
            if r["metrics"]:
                gen_t = sum(m.generated_tokens for m in r["metrics"])
                tau = gen_t / sum(m.row_target_calls for m in r["metrics"])
                acc = sum(m.accepted_tokens for m in r["metrics"]) / max(1, sum(m.draft_tokens for m in r["metrics"]))
                rt = sum(m.draft_seconds + m.translate_seconds + m.verify_seconds + m.bookkeeping_seconds for m in r["metrics"])
                share = sum(m.translate_seconds for m in r["metrics"]) / rt
            exact = None
            if not args.do_sample and name != "target-only":
                exact = all(torch.equal(a, b) for a, b in zip(r["outs"], rows[("target-only", batch)]["outs"]))
            fmt = lambda v, f: (f % v) if v is not None else "-"
            print(f"{name:<24}{batch:>6}{ratio:>13.2f}x{fmt(vs_hf, '%13.2fx'):>14}{fmt(tau, '%.2f'):>7}"
                  f"{fmt(acc, '%.2f'):>8}{fmt(share, '%.3f'):>11}{fmt(exact, '%s'):>7}")
            summary[f"{name}@{batch}"] = {"ratio_vs_target": ratio, "vs_transformers": vs_hf, "tau": tau,
                                          "acceptance": acc, "translate_share": share, "exact": exact}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
