#!/usr/bin/env python
"""SmolLM2-135M-Instruct with its feature head, side by side in ONE process, eager, fp32, rows interleaved.

Every ratio is against the FASTEST target-only path measured in the same run on the same prompts (on this CPU: the
target alone on the prepacked weights optimum-uag's runners use), and also against transformers' plain generate().
Rows alternate per prompt (the order rotates from prompt to prompt), the whole set is repeated --repeats times, and
each ratio is the median over the repeats of that repeat's ratio (this CPU drifts 25-35% within a run).

  chat@1       held-out chat requests, batch 1: the default (draft tree + prompt-lookup branch), the tree without
               lookup and a chain of K=5 without lookup, both at a fixed shape (tree vs chain, same head, as many
               verify columns), a wide tree (5, 4, 16) (EAGLE-2's comparison), the distilled same-tokenizer draft
  grounded@1   held-out input-grounded requests: prompt lookup alone, the default
  sample@1     chat, sampling T=0.7: the default (a tree, sampled at every node) vs the prepacked sampling control
  chat@4       batch 4: the default (an adaptive chain at batch > 1 on a CPU, no default n-grams, cut per round by
               the rows' draft probabilities), the tree forced, fixed chains of one and two tokens, the adaptive
               chain with its gate off
  uag@1        the cross-tokenizer draft: transformers' UAG vs optimum-uag's on the same pair, both K=5 constant
               (transformers' K set on assistant_model.generation_config, where it reads it)

    python benchmarks/bench_feature_head.py --output benchmarks/results/feature_head.json
    python scripts/bench_tables.py            # README / docs tables from the results file
"""
from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time

import torch

from optimum_uag import assisted_generate, embedded_models
from optimum_uag.engine.drafters import load_feature_head
from optimum_uag.models import chat_prompts, smollm2
from optimum_uag.models.prompt_sets import grounded_chat_prompts
from optimum_uag.runners.cost import verify_cost
from optimum_uag.runners.packed import packed_weights

from bench_smollm2 import _count, load

TARGET_ONLY = ("target-only", "target-only prepacked")
WIDE_TREE = (5, 4, 16)  # depth, top_k, nodes
WIDE_TREE_ROW = "head tree (5, 4, 16), no lookup"


def encode(tok, prompts):
    texts = [tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False)
             for q in prompts]
    return tok(texts, return_tensors="pt", padding=True, add_special_tokens=False, return_token_type_ids=False)


@torch.no_grad()
def head_cost(target, head, reps: int = 30) -> dict:
    """Median seconds of one head draft step (batch 1) and of one 1-token target forward (static runner)."""
    from optimum_uag.engine.drafters import FeatureDrafter
    from optimum_uag.engine.sampling import TokenSampler
    from optimum_uag.engine.state import DecodingState
    from optimum_uag.runners.cost import forward_seconds

    ids = torch.randint(0, 1000, (1, 200))
    state = DecodingState.create(ids, torch.zeros(1, dtype=torch.long), 400, 0, 64)
    drafter = FeatureDrafter(head, target, state, 400, target.config.vocab_size, TokenSampler(None, False), None, 5)
    drafter.last = torch.zeros(1, 1, target.config.hidden_size)
    times = []
    for i in range(reps + 3):
        t0 = time.perf_counter()
        drafter.forward(torch.tensor([[5]]), torch.tensor([201 + i])).argmax(-1)
        times.append(time.perf_counter() - t0)
    step = statistics.median(times[3:])
    target_1 = forward_seconds(target, 1, 1)
    return {"head_step_ms": step * 1e3, "target_1_ms": target_1 * 1e3, "ratio": step / target_1}


def target_only_rows(target, gen: dict) -> dict:
    """The two target-only rows every group runs: transformers' plain generate() and the same loop on the prepacked
    weights optimum-uag's runners use (on this CPU the fastest target-only path)."""
    pack = packed_weights(target)

    def packed(enc, m):
        with pack:
            return target.generate(**enc, max_new_tokens=m, **gen)

    return {"target-only": lambda enc, m: target.generate(**enc, max_new_tokens=m, **gen),
            "target-only prepacked": packed}


def smollm2_with_head():
    """The A/B scripts' setup: SmolLM2-135M-Instruct (prepacked by the engine's runners), its shipped head, and the
    greedy generation options (target, tokenizer, head, options)."""
    target, tok = load(smollm2())
    head = load_feature_head(embedded_models()["smollm2_head"])
    return target, tok, head, dict(do_sample=False, pad_token_id=tok.pad_token_id)


SAMPLE = dict(do_sample=True, temperature=0.7, top_k=0, top_p=1.0)  # the sampling group's options


def ab_setup(args):
    """An A/B script's setup for its --group (chat, grounded or sample) and --prompts: (target, tokenizer, head,
    generation options, prompts)."""
    target, tok, head, greedy = smollm2_with_head()
    gen = greedy if args.group != "sample" else dict(SAMPLE, pad_token_id=tok.pad_token_id)
    prompts = (grounded_chat_prompts() if args.group == "grounded" else chat_prompts())[: args.prompts]
    return target, tok, head, gen, prompts


def warm_up(rows: dict, tok, tokens: int = 8) -> None:
    """Each row once on a request no group measures (chat_prompts()[-1]): one-time costs out of the first repeat."""
    warm = encode(tok, chat_prompts()[-1:])
    for fn in rows.values():
        fn(warm, tokens)


def run_ab(rows: dict, tok, args, group: str, prompts, width: int = 48, key: str | None = None, **extra) -> dict:
    """An A/B script's run at batch 1: warm-up, the rows interleaved (run_group), printed, written to --output
    (group `key`, default `group`, merged with --merge); `extra` is added to the results."""
    warm_up(rows, tok)
    res = run_group(group, rows, prompts, 1, args.max_new_tokens, tok, args.repeats)
    res.update(extra)
    print_rows(res, width)
    if args.output:
        write_group(args.output, key or group, res, args.merge)
    return res


def print_rows(res: dict, width: int = 28) -> None:
    for name, row in res["rows"].items():
        print(f"{name:<{width}}{row['tokens_per_s']:7.1f} tok/s {row['speedup_vs_best_target_only']:6.3f}x "
              f"{row['speedup_vs_best_target_only_per_repeat']} tau {row.get('tau', float('nan')):.2f} "
              f"calls {row.get('target_calls')} exact {row.get('exact')}")


def cpu_name() -> str:
    """lscpu's model name (the results files say which CPU measured them)."""
    import subprocess

    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
    return next((line.split(":", 1)[1].strip() for line in lscpu if line.startswith("Model name")), "unknown")


def add_ab_arguments(p) -> None:
    """The A/B scripts' shared flags: requests, repeats, new tokens, the results file."""
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--max_new_tokens", type=int, default=128)
    p.add_argument("--output", default=None)
    p.add_argument("--merge", action="store_true", help="add this run's group to the --output file's groups")

def write_group(path: str, key: str, res: dict, merge: bool, cpu: bool = True) -> None:
    """The A/B scripts' results file: {"groups": {key: {"command": this command line, **res}}}; `merge` keeps the
    file's other groups. `cpu`: also the CPU and the date."""
    import os

    if cpu:
        res = {**res, "cpu": cpu_name(), "date": time.strftime("%Y-%m-%d")}
    out = {"groups": {}}
    if merge and os.path.exists(path):
        with open(path) as f:
            out = json.load(f)
    out["groups"][key] = {"command": f"python benchmarks/{os.path.basename(sys.argv[0])} " + " ".join(sys.argv[1:]),
                          **res}
    with open(path, "w") as f:
        json.dump(out, f, indent=1)


def run_group(name, rows: dict, prompts, batch, n, tok, repeats, seed=1000, encode=encode) -> dict:
    """Every row on every batch of prompts, interleaved (rotating order), `repeats` times; per row: median over the
    repeats of tokens/s and of the ratio to the fastest target-only row of the same repeat."""
    batches = [prompts[i : i + batch] for i in range(0, len(prompts) - batch + 1, batch)]
    encoded = [encode(tok, b) for b in batches]
    names = list(rows)
    per_rep = []
    for rep in range(repeats):
        acc = {r: {"seconds": 0.0, "tokens": 0, "outs": [], "metrics": None} for r in names}
        for i, enc in enumerate(encoded):
            shift = (i + rep) % len(names)
            for r in names[shift:] + names[:shift]:
                torch.manual_seed(seed + i)
                t0 = time.perf_counter()
                out = rows[r](enc, n)
                acc[r]["seconds"] += time.perf_counter() - t0
                seqs = out.sequences if hasattr(out, "sequences") else out
                acc[r]["tokens"] += _count(seqs[:, enc["input_ids"].shape[1]:], tok)
                acc[r]["outs"].append(seqs)
                if hasattr(out, "metrics"):
                    m = acc[r]["metrics"]
                    acc[r]["metrics"] = copy.deepcopy(out.metrics) if m is None else m.merge(out.metrics)
        per_rep.append(acc)
        rates = {r: acc[r]["tokens"] / acc[r]["seconds"] for r in names}
        print(f"[{name}] repeat {rep + 1}/{repeats}: " + ", ".join(f"{r} {v:.1f}" for r, v in rates.items()),
              flush=True)
    result = {}
    best_name = max((r for r in names if r in TARGET_ONLY),
                    key=lambda r: statistics.median(a[r]["tokens"] / a[r]["seconds"] for a in per_rep))
    for r in names:
        rates = [a[r]["tokens"] / a[r]["seconds"] for a in per_rep]
        vs_best = [a[r]["tokens"] / a[r]["seconds"] / (a[best_name]["tokens"] / a[best_name]["seconds"])
                   for a in per_rep]
        vs_plain = [a[r]["tokens"] / a[r]["seconds"] / (a["target-only"]["tokens"] / a["target-only"]["seconds"])
                    for a in per_rep]
        row = {"batch": batch, "tokens_per_s": statistics.median(rates), "tokens": per_rep[0][r]["tokens"],
               "speedup_vs_best_target_only": statistics.median(vs_best),
               "speedup_vs_transformers_generate": statistics.median(vs_plain),
               "speedup_vs_best_target_only_per_repeat": [round(v, 4) for v in vs_best]}
        m = per_rep[-1][r]["metrics"]
        if m is not None:
            total = m.seconds
            row.update(tau=m.tau, acceptance=m.acceptance_rate, draft_share=(m.draft_seconds + m.translate_seconds)
                       / total, verify_share=m.verify_seconds / total, target_calls=m.target_calls,
                       tree_rounds_share=m.tree_rounds / m.target_calls if m.target_calls else 0.0,
                       draft_tree=[list(s) for s in m.tree_shapes] or None)
            if m.adaptive_rounds:  # the adaptive draft length's choices
                row.update(mean_draft_length=m.mean_draft_length,
                           rounds_without_draft_share=m.rounds_without_draft / m.adaptive_rounds)
        if r != "target-only":
            row["exact"] = all(torch.equal(x, y) for a in per_rep
                               for x, y in zip(a[r]["outs"], a["target-only"]["outs"]))
        result[r] = row
    print(f"[{name}] " + json.dumps({r: {k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()
                                         if k != "speedup_vs_best_target_only_per_repeat"}
                                     for r, row in result.items()}), flush=True)
    return {"rows": result, "best_target_only": best_name, "prompts": len(prompts), "batch": batch}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--max_new_tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--lookup", type=int, default=8, help="prompt_lookup_num_tokens")
    p.add_argument("--chain_k", type=int, default=5, help="K of the head's chain row (tree vs chain)")
    p.add_argument("--head", default=None, help="head directory (default: the shipped smollm2_head)")
    p.add_argument("--skip", default="", help="comma-separated groups to skip (chat,grounded,sample,batch4,uag)")
    p.add_argument("--output", default=None)
    p.add_argument("--merge", action="store_true", help="replace only the groups run here in an existing --output")
    args = p.parse_args()
    skip = set(args.skip.split(","))
    target, tok = load(smollm2())
    head = load_feature_head(args.head or embedded_models()["smollm2_head"])
    same = load(embedded_models()["smollm2_assistant"])[0]
    cross, ctok = load(embedded_models()["smollm2_assistant_cross"])
    held = chat_prompts()
    chat = held[: args.prompts]
    grounded = grounded_chat_prompts()[: args.prompts]
    n = args.max_new_tokens
    greedy = dict(do_sample=False, pad_token_id=tok.pad_token_id)
    sample = dict(SAMPLE, pad_token_id=tok.pad_token_id)

    def ours(draft, gen, **options):
        return lambda enc, m: assisted_generate(target, draft, enc["input_ids"], enc["attention_mask"],
                                                max_new_tokens=m, **options, **gen)

    def without_gate(fn):  # the adaptive chain with its gate (AdaptivePolicy.gate) off: K 2 past the best fixed one
        from optimum_uag.engine.policy import AdaptivePolicy

        def run(enc, m):
            gate = AdaptivePolicy.gate
            AdaptivePolicy.gate = lambda self: None
            try:
                return fn(enc, m)
            finally:
                AdaptivePolicy.gate = gate
        return run

    def baselines(gen):
        return target_only_rows(target, gen)

    hf_cross = copy.deepcopy(cross)  # transformers reads K from the assistant's generation_config
    hf_cross.generation_config.num_assistant_tokens = 5
    hf_cross.generation_config.num_assistant_tokens_schedule = "constant"
    hf_cross.generation_config.assistant_confidence_threshold = 0.0
    groups = {
        "chat@1": (chat, 1, greedy, {
            "head default (tree + lookup branch)": ours(head, greedy),
            # the same with a draft every round: what the adaptive policy's rounds without a draft cost or save here
            "head default, fixed policy": ours(head, greedy, draft_policy="fixed"),
            # tree vs chain, same head: both at a fixed shape (an adaptive row's tau counts its rounds without a draft)
            "head tree, no lookup": ours(head, greedy, prompt_lookup_num_tokens=0, draft_policy="fixed"),
            # EAGLE-2's comparison: the same head drafting a wide tree (more verify columns than the chain's)
            WIDE_TREE_ROW: ours(head, greedy, prompt_lookup_num_tokens=0, draft_policy="fixed",
                                **dict(zip(("tree_depth", "tree_top_k", "tree_nodes"), WIDE_TREE))),
            f"head chain K={args.chain_k}, no lookup": ours(head, greedy, num_assistant_tokens=args.chain_k,
                                                           prompt_lookup_num_tokens=0),
            "distilled draft K=3": ours(same, greedy, num_assistant_tokens=3)}),
        "grounded@1": (grounded, 1, greedy, {
            f"prompt lookup {args.lookup}": ours(None, greedy, prompt_lookup_num_tokens=args.lookup,
                                                num_assistant_tokens=args.lookup),
            "head default (tree + lookup branch)": ours(head, greedy)}),
        "sample@1": (chat, 1, sample, {"head default (tree + lookup branch)": ours(head, sample)}),
        "chat@4": (chat, 4, greedy, {"head default (batch > 1 on CPU: adaptive chain)": ours(head, greedy),
                                     "head tree + lookup branch (draft_tree=True)": ours(head, greedy, draft_tree=True),
                                     "head chain K=1, no lookup": ours(head, greedy, num_assistant_tokens=1,
                                                                      prompt_lookup_num_tokens=0),
                                     "head chain K=2, no lookup": ours(head, greedy, num_assistant_tokens=2,
                                                                      prompt_lookup_num_tokens=0),
                                     "head adaptive chain, gate off": without_gate(ours(head, greedy))}),
        "uag@1": (chat, 1, greedy, {
            "transformers UAG K=5": lambda enc, m: target.generate(
                **enc, max_new_tokens=m, assistant_model=hf_cross, tokenizer=tok, assistant_tokenizer=ctok, **greedy),
            "optimum-uag UAG K=5": ours(cross, greedy, num_assistant_tokens=5, tokenizer=tok,
                                        assistant_tokenizer=ctok)}),
    }
    warm = encode(tok, held[args.prompts : args.prompts + 1])
    for fn in (*baselines(greedy).values(), ours(head, greedy), ours(same, greedy)):
        fn(warm, 8)
    results, notes = {}, []
    names = {"chat@1": "chat", "grounded@1": "grounded", "sample@1": "sample", "chat@4": "batch4", "uag@1": "uag"}
    for group, (prompts, batch, gen, rows) in groups.items():
        if names[group] in skip:
            continue
        try:
            results[group] = run_group(group, {**baselines(gen), **rows}, prompts, batch, n, tok, args.repeats)
        except RuntimeError as err:  # transformers 5.25's own UAG raises on an empty assistant prefill
            if group != "uag@1":
                raise
            notes.append(f"uag@1 left out: transformers' own UAG failed inside transformers "
                         f"({str(err).strip().splitlines()[-1][:160]}); with --merge the earlier group stays")
            print(notes[-1], flush=True)
            continue
        if group == "uag@1":
            r = results[group]["rows"]
            r["optimum-uag UAG K=5"]["speedup_vs_transformers_assisted"] = (
                r["optimum-uag UAG K=5"]["tokens_per_s"] / r["transformers UAG K=5"]["tokens_per_s"])
    cost = head_cost(target, head)
    curve = verify_cost(target, (1, 2, 4, 6, 9, 12, 17, 25, 33))
    # batch 4: W tokens per row (a chain of W - 1 drafted tokens), what a chat@4 round verifies
    curve4 = verify_cost(target, (1, 2, 3, 4, 5), batch=4) if "batch4" not in skip else None
    print(f"\nSmolLM2-135M-Instruct fp32 eager, {args.prompts} prompts, {n} new tokens, {args.repeats} repeats; head "
          f"step {cost['head_step_ms']:.2f} ms = {cost['ratio']:.3f} of a 1-token target forward; verify cost "
          + ", ".join(f"W={w}: {c:.2f}" for w, c in curve["relative"].items()))
    print(f"{'group':<11}{'row':<42}{'tok/s':>7}{'vs best':>9}{'vs gen':>8}{'tau':>6}{'exact':>7}")
    for group, res in results.items():
        for name, r in res["rows"].items():
            tau = f"{r['tau']:.2f}" if "tau" in r else "-"
            print(f"{group:<11}{name:<42}{r['tokens_per_s']:>7.1f}{r['speedup_vs_best_target_only']:>8.2f}x"
                  f"{r['speedup_vs_transformers_generate']:>7.2f}x{tau:>6}{str(r.get('exact', '-')):>7}")
    cpu = cpu_name()
    summary = {"date": time.strftime("%Y-%m-%d"), "model": "SmolLM2-135M-Instruct", "dtype": "float32", "cpu": cpu,
               "prompts": args.prompts, "max_new_tokens": n, "repeats": args.repeats, "lookup": args.lookup,
               "head": args.head or "smollm2_head (shipped)", "head_cost": cost, "verify_cost": curve,
               **({"verify_cost_batch4": curve4} if curve4 else {}),
               "command": "python benchmarks/bench_feature_head.py " + " ".join(sys.argv[1:]),
               "groups": results, **({"notes": notes} if notes else {})}
    if args.output:
        if args.merge:  # keep the groups of the earlier run that this one skipped
            import os

            if os.path.exists(args.output):
                with open(args.output) as f:
                    earlier = json.load(f)
                summary["groups"] = {**earlier.get("groups", {}), **results}
                summary["merged"] = f"groups {sorted(results)} rerun {summary['date']}; the others from the earlier run"
        with open(args.output, "w") as f:
            json.dump(summary, f, indent=1, default=str)


if __name__ == "__main__":
    main()
