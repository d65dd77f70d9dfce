#!/usr/bin/env python
"""SmolLM2-135M-Instruct with its distilled drafts, side by side in ONE process, on held-out chat requests.

Rows (all methods on the same inputs, ratios to target-only measured in this run):
  same-tokenizer draft, batch 1: target-only, transformers assisted generation, optimum-uag
  cross-tokenizer draft (UAG), batch 1: transformers UAG, optimum-uag
  same-tokenizer draft, batch 4: target-only (batched generate), optimum-uag
K is chosen per pair by a sweep on tuning prompts that are not measured. The efficiency column is the measured
speedup over the bound implied by the measured tau and the measured cost of each forward shape in this run:
    bound = tau * c_target(1) / (K * c_draft(1) + c_draft(2) + c_target(K + 1))

    python benchmarks/bench_smollm2.py                      # greedy, eager
    python benchmarks/bench_smollm2.py --do_sample          # sampling, T=0.7
    python benchmarks/bench_smollm2.py --torch_compile      # compiled optimum-uag vs compiled target-only
"""
from __future__ import annotations

import argparse
import copy
import json
import statistics
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from optimum_uag import assisted_generate, embedded_models
from optimum_uag.models import chat_prompts, smollm2
from optimum_uag.runners.registry import make_runner


def load(path):
    tok = AutoTokenizer.from_pretrained(path)
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32).eval(), tok


@torch.no_grad()
def forward_cost(model, batch: int, width: int, context: int = 200, reps: int = 8) -> float:
    """Median seconds of one `width`-token forward at `context` tokens of cache, on our static runner."""
    runner = make_runner(model, batch, context + width + 8, torch.zeros(batch, dtype=torch.long))
    vocab = model.config.vocab_size
    runner.forward(torch.randint(0, vocab, (batch, context)), torch.zeros(batch, dtype=torch.long))
    start = torch.full((batch,), context, dtype=torch.long)
    times = []
    for _ in range(reps + 2):
        tokens = torch.randint(0, vocab, (batch, width))
        t0 = time.perf_counter()
        runner.forward(tokens, start, logits_to_keep=width)
        times.append(time.perf_counter() - t0)
    return statistics.median(times[2:])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--tune_prompts", type=int, default=3)
    p.add_argument("--max_new_tokens", type=int, default=128)
    p.add_argument("--k_grid", default="3,4,5,6,8")
    p.add_argument("--batch4", type=int, default=4)
    p.add_argument("--do_sample", action="store_true")
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--torch_compile", action="store_true")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--output", default=None, help="write the summary JSON here")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    target, tok = load(smollm2())
    drafts = {"same": load(embedded_models()["smollm2_assistant"]),
              "cross": load(embedded_models()["smollm2_assistant_cross"])}
    held = chat_prompts()
    measure, tune = held[: args.prompts], held[args.prompts : args.prompts + args.tune_prompts]

    def encode(prompts):
        texts = [tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False)
                 for q in prompts]
        return tok(texts, return_tensors="pt", padding=True, add_special_tokens=False, return_token_type_ids=False)

    gen = dict(do_sample=args.do_sample, pad_token_id=tok.pad_token_id)
    if args.do_sample:
        gen.update(temperature=args.temperature, top_k=0, top_p=1.0)
    baseline_kw = {}
    if args.torch_compile:
        from optimum_uag.runners.compile import transformers_compile_config

        baseline_kw = dict(cache_implementation="static", compile_config=transformers_compile_config(target.device))

    def target_only(enc, n):
        return target.generate(**enc, max_new_tokens=n, **gen, **baseline_kw)

    def ours(pair, k):
        draft, dtok = drafts[pair]
        uag = dict(tokenizer=tok, assistant_tokenizer=dtok) if pair == "cross" else {}
        return lambda enc, n: assisted_generate(target, draft, enc["input_ids"], enc["attention_mask"], max_new_tokens=n,
                                                num_assistant_tokens=k, torch_compile=args.torch_compile, **uag, **gen)

    hf_drafts = {pair: copy.deepcopy(d) for pair, (d, _) in drafts.items()}  # transformers edits a UAG draft in place

    def transformers(pair, k):
        draft = hf_drafts[pair]
        draft.generation_config.num_assistant_tokens = k
        draft.generation_config.num_assistant_tokens_schedule = "constant"
        draft.generation_config.assistant_confidence_threshold = 0.0
        uag = dict(tokenizer=tok, assistant_tokenizer=drafts[pair][1]) if pair == "cross" else {}
        return lambda enc, n: target.generate(**enc, max_new_tokens=n, assistant_model=draft, **uag, **gen)

    def run(fn, prompts, batch, n):
        """(seconds, new tokens, outputs, metrics) over the prompts in batches; same seed per batch for every method."""
        seconds, tokens, outs, metrics = 0.0, 0, [], []
        for i in range(0, len(prompts) - batch + 1, batch):
            enc = encode(prompts[i : i + batch])
            torch.manual_seed(1000 + i)
            t0 = time.perf_counter()
            out = fn(enc, n)
            seconds += time.perf_counter() - t0
            seqs = out.sequences if hasattr(out, "sequences") else out
            new = seqs[:, enc["input_ids"].shape[1]:]
            tokens += _count(new, tok)
            outs.append(seqs)
            if hasattr(out, "metrics"):
                metrics.append(out.metrics)
        return seconds, tokens, outs, metrics

    # warm-up (and compilation, timed apart)
    t0 = time.perf_counter()
    warm = encode(tune[:1])
    target_only(warm, 16)
    compile_seconds = {"target_only": time.perf_counter() - t0}
    for pair in drafts:
        for k in [int(x) for x in args.k_grid.split(",")]:
            t0 = time.perf_counter()
            ours(pair, k)(warm, 16)
            compile_seconds[f"optimum_uag_{pair}_K{k}"] = time.perf_counter() - t0
        transformers(pair, 4)(warm, 16)

    # K by the tuner: best throughput of optimum-uag on the tuning prompts
    chosen = {}
    base_tune = run(target_only, tune, 1, args.max_new_tokens // 2)
    for pair in drafts:
        best = None
        for k in [int(x) for x in args.k_grid.split(",")]:
            s, n, _, _ = run(ours(pair, k), tune, 1, args.max_new_tokens // 2)
            rate = n / s
            print(f"[tune] {pair} K={k}: {rate / (base_tune[1] / base_tune[0]):.2f}x", flush=True)
            if best is None or rate > best[1]:
                best = (k, rate)
        chosen[pair] = best[0]

    rows = {}

    def row(name, fn, batch, base_key, pair=None, k=None):
        s, n, outs, metrics = run(fn, measure, batch, args.max_new_tokens)
        r = {"batch": batch, "tok_s": n / s, "seconds": s, "tokens": n, "outs": outs}
        if metrics:
            gen_t = sum(m.generated_tokens for m in metrics)
            r["tau"] = gen_t / sum(m.row_target_calls for m in metrics)
            r["acceptance"] = sum(m.accepted_tokens for m in metrics) / max(1, sum(m.draft_tokens for m in metrics))
            rt = sum(m.draft_seconds + m.translate_seconds + m.verify_seconds + m.bookkeeping_seconds for m in metrics)
            r["profile"] = {key: sum(getattr(m, key) for m in metrics) / rt for key in
                            ("draft_seconds", "translate_seconds", "verify_seconds", "bookkeeping_seconds")}
        if base_key is not None:
            r["vs_target"] = r["tok_s"] / rows[base_key]["tok_s"]
            if not args.do_sample:
                r["exact"] = all(torch.equal(a, b) for a, b in zip(outs, rows[base_key]["outs"]))
        if pair is not None and "tau" in r:
            draft = drafts[pair][0]
            c_t1 = forward_cost(target, batch, 1)
            c_tv = forward_cost(target, batch, k + 1)
            c_d1, c_d2 = forward_cost(draft, batch, 1), forward_cost(draft, batch, 2)
            r["costs_ms"] = {"target_1": c_t1 * 1e3, f"target_{k + 1}": c_tv * 1e3, "draft_1": c_d1 * 1e3,
                             "draft_2": c_d2 * 1e3}
            r["bound"] = r["tau"] * c_t1 / (k * c_d1 + c_d2 + c_tv)
            r["efficiency"] = r["vs_target"] / r["bound"] if "vs_target" in r else None
        rows[name] = r
        print(f"[row] {name}: " + json.dumps({k_: v for k_, v in r.items() if k_ != "outs"}, default=str), flush=True)

    row("target-only@1", target_only, 1, None)
    row("transformers same@1", transformers("same", chosen["same"]), 1, "target-only@1")
    row("optimum-uag same@1", ours("same", chosen["same"]), 1, "target-only@1", "same", chosen["same"])
    row("transformers UAG@1", transformers("cross", chosen["cross"]), 1, "target-only@1")
    row("optimum-uag UAG@1", ours("cross", chosen["cross"]), 1, "target-only@1", "cross", chosen["cross"])
    if args.batch4 > 1:
        b = args.batch4
        row(f"target-only@{b}", target_only, b, None)
        row(f"optimum-uag same@{b}", ours("same", chosen["same"]), b, f"target-only@{b}", "same", chosen["same"])

    for name, other in (("optimum-uag same@1", "transformers same@1"), ("optimum-uag UAG@1", "transformers UAG@1")):
        rows[name]["vs_transformers"] = rows[name]["tok_s"] / rows[other]["tok_s"]
    mode = f"sampling T={args.temperature}" if args.do_sample else "greedy"
    print(f"\nSmolLM2-135M-Instruct, fp32, {mode}, {'torch.compile' if args.torch_compile else 'eager'}, "
          f"{len(measure)} held-out chat prompts, {args.max_new_tokens} new tokens; K tuned: {chosen}")
    print(f"{'method':<26}{'tok/s':>8}{'vs target':>11}{'vs HF':>8}{'tau':>6}{'accept':>8}{'bound':>7}{'eff.':>6}{'exact':>7}")
    fmt = lambda v, f: (f % v) if isinstance(v, (int, float)) else "-"
    for name, r in rows.items():
        print(f"{name:<26}{r['tok_s']:>8.1f}{fmt(r.get('vs_target'), '%10.2fx'):>11}{fmt(r.get('vs_transformers'), '%7.2fx'):>8}"
              f"{fmt(r.get('tau'), '%.2f'):>6}{fmt(r.get('acceptance'), '%.2f'):>8}{fmt(r.get('bound'), '%.2f'):>7}"
              f"{fmt(r.get('efficiency'), '%.2f'):>6}{str(r.get('exact', '-')):>7}")
    summary = {"mode": mode, "compiled": args.torch_compile, "k": chosen, "warmup_seconds": compile_seconds,
               "rows": {n: {k_: v for k_, v in r.items() if k_ != "outs"} for n, r in rows.items()}}
    print(json.dumps(summary, default=str))
    if args.output:
        with open(args.output, "w") as f:
            json.dump(summary, f, indent=1, default=str)


def _count(new: torch.Tensor, tok) -> int:
    """Generated tokens up to and including each row's EOS."""
    total = 0
    for row in new.tolist():
        total += row.index(tok.eos_token_id) + 1 if tok.eos_token_id in row else len(row)
    return total


if __name__ == "__main__":
    main()
