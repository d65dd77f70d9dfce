#!/usr/bin/env python
"""SmolLM2-135M-Instruct with its feature head (and prompt lookup), side by side in ONE process, eager, fp32.

Rows (the goals of the drafts issue), every ratio measured against target-only in this run on the same inputs:
  chat@1        held-out chat requests, batch 1: target-only, feature head (K tuned), head + lookup,
                the distilled same-tokenizer draft (reference)
  grounded@1    held-out input-grounded requests (fix / rewrite / annotate / extract): target-only, lookup, head +
                lookup
  sample@1      chat, sampling T=0.7: target-only, head + lookup
  chat@4        batch 4: target-only (batched generate), head + lookup
  UAG@1         the cross-tokenizer draft: transformers' UAG vs optimum-uag on the same pair
  head cost     one head step vs one 1-token target forward (static runner), measured here
  prepacked     target-only on the prepacked CPU weights optimum-uag's runners use (the kernels' share of the
                speedup, no drafting; runners/packed.py); OPTIMUM_UAG_PACKED_WEIGHTS=0 runs every row unpacked

    python benchmarks/bench_feature_head.py --output benchmarks/results/feature_head.json
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
from optimum_uag.models import chat_prompts, smollm2
from optimum_uag.models.chat_prompts import grounded_chat_prompts
from optimum_uag.runners.packed import packed_weights

from bench_smollm2 import _count, forward_cost, load


def encode(tok, prompts):
    texts = [tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False)
             for q in prompts]
    return tok(texts, return_tensors="pt", padding=True, add_special_tokens=False, return_token_type_ids=False)


def run(fn, tok, prompts, batch, n, seed=1000):
    """(seconds, new tokens, outputs, merged metrics) over the prompts in batches; same seed per batch."""
    seconds, tokens, outs, metrics = 0.0, 0, [], None
    for i in range(0, len(prompts) - batch + 1, batch):
        enc = encode(tok, prompts[i : i + batch])
        torch.manual_seed(seed + i)
        t0 = time.perf_counter()
        out = fn(enc, n)
        seconds += time.perf_counter() - t0
        seqs = out.sequences if hasattr(out, "sequences") else out
        tokens += _count(seqs[:, enc["input_ids"].shape[1]:], tok)
        outs.append(seqs)
        if hasattr(out, "metrics"):
            metrics = copy.deepcopy(out.metrics) if metrics is None else metrics.merge(out.metrics)
    return seconds, tokens, outs, metrics


@torch.no_grad()
def head_cost(target, head, reps: int = 30) -> dict:
    """Median seconds of one head draft step (batch 1) and of one 1-token target forward."""
    from optimum_uag.engine.drafters import FeatureDrafter
    from optimum_uag.engine.sampling import TokenSampler
    from optimum_uag.engine.state import DecodingState

    ids = torch.randint(0, 1000, (1, 200))
    state = DecodingState.create(ids, torch.zeros(1, dtype=torch.long), 400, 0, 64)
    drafter = FeatureDrafter(head, target, state, 400, target.config.vocab_size, TokenSampler(None, False), None, 5)
    drafter.last = torch.zeros(1, 1, target.config.hidden_size)
    times = []
    for i in range(reps + 3):
        t0 = time.perf_counter()
        logits = drafter.forward(torch.tensor([[5]]), torch.tensor([201 + i]))
        logits.argmax(-1)
        times.append(time.perf_counter() - t0)
    step = statistics.median(times[3:])
    target_1 = forward_cost(target, 1, 1)
    return {"head_step_ms": step * 1e3, "target_1_ms": target_1 * 1e3, "ratio": step / target_1}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--max_new_tokens", type=int, default=128)
    p.add_argument("--k_grid", default="3,4,5")
    p.add_argument("--lookup", type=int, default=8, help="prompt_lookup_num_tokens")
    p.add_argument("--head", default=None, help="head directory (default: the shipped smollm2_head)")
    p.add_argument("--skip", default="", help="comma-separated row groups to skip (chat,grounded,sample,batch4,uag)")
    p.add_argument("--output", default=None)
    args = p.parse_args()
    skip = set(args.skip.split(","))
    target, tok = load(smollm2())
    head = load_feature_head(args.head or embedded_models()["smollm2_head"])
    same = load(embedded_models()["smollm2_assistant"])[0]
    cross, ctok = load(embedded_models()["smollm2_assistant_cross"])
    held = chat_prompts()
    chat, tune = held[: args.prompts], held[args.prompts : args.prompts + 3]
    grounded = grounded_chat_prompts()[: args.prompts]
    n = args.max_new_tokens
    greedy = dict(do_sample=False, pad_token_id=tok.pad_token_id)
    sample = dict(do_sample=True, temperature=0.7, top_k=0, top_p=1.0, pad_token_id=tok.pad_token_id)

    def target_only(gen):
        return lambda enc, m: target.generate(**enc, max_new_tokens=m, **gen)

    pack = packed_weights(target)

    def target_only_packed(gen):  # the kernels alone: the target on the prepacked weights our runners use
        def fn(enc, m):
            with pack:
                return target.generate(**enc, max_new_tokens=m, **gen)
        return fn

    def ours(draft, k, gen, lookup=None, **pair):
        extra = {"prompt_lookup_num_tokens": lookup} if lookup else {}
        return lambda enc, m: assisted_generate(target, draft, enc["input_ids"], enc["attention_mask"],
                                                max_new_tokens=m, num_assistant_tokens=k, **pair, **extra, **gen)

    warm = encode(tok, tune[:1])
    target_only(greedy)(warm, 8)
    ours(head, 3, greedy)(warm, 8)
    base_tune = run(target_only(greedy), tok, tune, 1, n // 2)
    best = None
    for k in [int(x) for x in args.k_grid.split(",")]:  # K for the head, tuned on prompts that are not measured
        s, t, _, _ = run(ours(head, k, greedy), tok, tune, 1, n // 2)
        print(f"[tune] head K={k}: {(t / s) / (base_tune[1] / base_tune[0]):.2f}x", flush=True)
        if best is None or t / s > best[1]:
            best = (k, t / s)
    k = best[0]
    rows = {}

    def row(name, fn, prompts, batch, base=None, gen=greedy):
        s, t, outs, m = run(fn, tok, prompts, batch, n)
        r = {"batch": batch, "tok_s": t / s, "tokens": t, "seconds": s}
        if m is not None:
            total = m.seconds
            r.update(tau=m.tau, acceptance=m.acceptance_rate, draft_share=(m.draft_seconds + m.translate_seconds) / total,
                     verify_share=m.verify_seconds / total)
        if base is not None:
            r["vs_target"] = r["tok_s"] / rows[base]["tok_s"]
            if not gen["do_sample"]:
                r["exact"] = all(torch.equal(a, b) for a, b in zip(outs, rows[base]["outs"]))
        r["outs"] = outs
        rows[name] = r
        print(f"[row] {name}: " + json.dumps({a: b for a, b in r.items() if a != "outs"}, default=str), flush=True)

    if "chat" not in skip:
        row("target-only chat@1", target_only(greedy), chat, 1)
        if pack is not None:
            row("target-only prepacked chat@1", target_only_packed(greedy), chat, 1, "target-only chat@1")
        row(f"head K={k} chat@1", ours(head, k, greedy), chat, 1, "target-only chat@1")
        row(f"head+lookup K={k} chat@1", ours(head, k, greedy, args.lookup), chat, 1, "target-only chat@1")
        row("distilled draft K=3 chat@1", ours(same, 3, greedy), chat, 1, "target-only chat@1")
    if "grounded" not in skip:
        row("target-only grounded@1", target_only(greedy), grounded, 1)
        if pack is not None:
            row("target-only prepacked grounded@1", target_only_packed(greedy), grounded, 1, "target-only grounded@1")
        row(f"lookup {args.lookup} grounded@1", ours(None, args.lookup, greedy, args.lookup), grounded, 1,
            "target-only grounded@1")
        row(f"head+lookup K={k} grounded@1", ours(head, k, greedy, args.lookup), grounded, 1, "target-only grounded@1")
    if "sample" not in skip:
        row("target-only sample@1", target_only(sample), chat, 1, gen=sample)
        row(f"head+lookup K={k} sample@1", ours(head, k, sample, args.lookup), chat, 1, "target-only sample@1",
            gen=sample)
    if "batch4" not in skip:
        row("target-only chat@4", target_only(greedy), chat, 4)
        if pack is not None:
            row("target-only prepacked chat@4", target_only_packed(greedy), chat, 4, "target-only chat@4")
        row(f"head+lookup K={k} chat@4", ours(head, k, greedy, args.lookup), chat, 4, "target-only chat@4")
    if "uag" not in skip:
        hf_cross = copy.deepcopy(cross)
        hf_cross.generation_config.num_assistant_tokens = 3
        hf_cross.generation_config.num_assistant_tokens_schedule = "constant"
        hf_cross.generation_config.assistant_confidence_threshold = 0.0
        row("target-only uag@1", target_only(greedy), chat, 1)
        row("transformers UAG K=3 @1", lambda enc, m: target.generate(
            **enc, max_new_tokens=m, assistant_model=hf_cross, tokenizer=tok, assistant_tokenizer=ctok, **greedy),
            chat, 1, "target-only uag@1")
        row("optimum-uag UAG K=3 @1", ours(cross, 3, greedy, tokenizer=tok, assistant_tokenizer=ctok), chat, 1,
            "target-only uag@1")
        rows["optimum-uag UAG K=3 @1"]["vs_transformers"] = (rows["optimum-uag UAG K=3 @1"]["tok_s"]
                                                            / rows["transformers UAG K=3 @1"]["tok_s"])
    cost = head_cost(target, head)
    print(f"\nSmolLM2-135M-Instruct fp32 eager, {args.prompts} prompts per row, {n} new tokens, head K={k}, "
          f"lookup {args.lookup}; head step {cost['head_step_ms']:.2f} ms = {cost['ratio']:.3f} of a 1-token target "
          f"forward ({cost['target_1_ms']:.1f} ms)")
    fmt = lambda v, f: (f % v) if isinstance(v, (int, float)) else "-"  # noqa: E731
    print(f"{'row':<30}{'tok/s':>8}{'vs target':>11}{'tau':>6}{'accept':>8}{'draft':>7}{'exact':>7}")
    for name, r in rows.items():
        print(f"{name:<30}{r['tok_s']:>8.1f}{fmt(r.get('vs_target'), '%10.2fx'):>11}{fmt(r.get('tau'), '%.2f'):>6}"
              f"{fmt(r.get('acceptance'), '%.2f'):>8}{fmt(r.get('draft_share'), '%.2f'):>7}{str(r.get('exact', '-')):>7}")
    summary = {"k": k, "lookup": args.lookup, "head_cost": cost, "prompts": args.prompts, "max_new_tokens": n,
               "rows": {a: {c: d for c, d in r.items() if c != "outs"} for a, r in rows.items()}}
    if args.output:
        with open(args.output, "w") as f:
            json.dump(summary, f, indent=1, default=str)


if __name__ == "__main__":
    main()
