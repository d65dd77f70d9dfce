#!/usr/bin/env python
"""chat@4 A/B of the adaptive chain's cost model (engine/policy.py): a drafting round's extra time over a round
without a draft as a fitted line c + s K (COST_LINE; the default, with the gate up to the best fixed length: GATE_REACH
0) against s K alone (the line through the origin, before, with GATE_REACH 1), beside fixed K=1 / K=2 chains; SmolLM2-135M-Instruct + its head, fp32, rows interleaved per batch of prompts
(bench_feature_head.run_group), median of the repeats, ratios against the prepacked target-only row of the same run.
Each adaptive row also reports its chains' K (mean, histogram) and each forced K's measured round time over t0.

    python benchmarks/bench_cost_line.py --prompts 16 --repeats 3 --output /tmp/cost_line.json
"""
from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time

from optimum_uag import assisted_generate
from optimum_uag.engine import policy
from optimum_uag.models import chat_prompts

from bench_feature_head import cpu_name, print_rows, run_group, smollm2_with_head, target_only_rows, warm_up


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--max_new_tokens", type=int, default=128)
    p.add_argument("--rows", default=None,
                   help="semicolon-separated drafted rows to run (default: all but the forced ones); 'forced K=1' / "
                        "'forced K=2': the adaptive policy's machinery (gate, timing, a round without a draft every "
                        "REFRESH) with every other round at that K")
    p.add_argument("--output", default=None)
    args = p.parse_args()
    target, tok, head, greedy = smollm2_with_head()
    rounds: dict[str, list] = {}
    observe = policy.AdaptivePolicy.observe

    choose = policy.AdaptivePolicy._choose

    def ours(name, line=True, reach=None, forced=None, **options):
        def fn(enc, m):
            old, old_reach = policy.COST_LINE, policy.GATE_REACH
            policy.GATE_REACH = old_reach if reach is None else reach
            if forced is not None:
                policy.AdaptivePolicy._choose = lambda self: (
                    0 if self.t0 is None or self.drafting >= policy.REFRESH else forced)

            def logged(self, k, seconds, *rest):
                rounds.setdefault(name, []).append((k, seconds, self.t0, self.cost_line()))
                return observe(self, k, seconds, *rest)
            policy.COST_LINE, policy.AdaptivePolicy.observe = line, logged
            try:
                return assisted_generate(target, head, enc["input_ids"], enc["attention_mask"], max_new_tokens=m,
                                         **options, **greedy)
            finally:
                policy.COST_LINE, policy.AdaptivePolicy.observe, policy.GATE_REACH = old, observe, old_reach
                policy.AdaptivePolicy._choose = choose
        return fn

    drafted = {"cost line, reach 1": ours("cost line, reach 1", reach=1),
            "cost line, reach 0 (default)": ours("cost line, reach 0 (default)"),
            "s K, reach 1 (before)": ours("s K, reach 1 (before)", line=False, reach=1),
            "fixed K=1": ours("fixed K=1", num_assistant_tokens=1, prompt_lookup_num_tokens=0),
            "fixed K=2": ours("fixed K=2", num_assistant_tokens=2, prompt_lookup_num_tokens=0),
            "forced K=1": ours("forced K=1", forced=1), "forced K=2": ours("forced K=2", forced=2)}
    names = args.rows.split(";") if args.rows else [n for n in drafted if not n.startswith("forced")]
    if set(names) - set(drafted):
        p.error(f"--rows: unknown {sorted(set(names) - set(drafted))}; known: {list(drafted)}")
    rows = {**target_only_rows(target, greedy), **{n: drafted[n] for n in names}}
    warm_up(rows, tok)
    rounds.clear()
    res = run_group(f"chat@{args.batch}", rows, chat_prompts()[: args.prompts], args.batch, args.max_new_tokens, tok,
                    args.repeats)
    for name, log in rounds.items():
        ks = [k for k, *_ in log if k > 0]
        stats = {"drafting_rounds": len(ks), "rounds_without_draft": sum(1 for k, *_ in log if k == 0)}
        if ks:
            stats["mean_k"] = round(sum(ks) / len(ks), 3)
            stats["k_histogram"] = {str(k): ks.count(k) for k in sorted(set(ks))}
        rel = {}
        for k, s, t0, _ in log:
            if k > 0 and t0:
                rel.setdefault(k, []).append(s / t0)
        stats["round_seconds_over_t0_median"] = {str(k): round(statistics.median(v), 3) for k, v in sorted(rel.items())}
        lines = [line for *_, line in log if line is not None]
        if lines:
            t0s = [t0 for *_, t0, line in log if line is not None]
            stats["line_over_t0_median"] = {"c": round(statistics.median(c / t for (c, _), t in zip(lines, t0s)), 3),
                                            "s": round(statistics.median(s / t for (_, s), t in zip(lines, t0s)), 3),
                                            "rounds_with_line": len(lines)}
        res["rows"][name]["rounds"] = stats
    res["shipped_cost_line"] = policy.COST_LINE
    res.update(command="python benchmarks/bench_cost_line.py " + " ".join(shlex.quote(a) for a in sys.argv[1:]), cpu=cpu_name(),
               date=time.strftime("%Y-%m-%d"))
    print_rows(res, 24)
    for name in rounds:
        print(name, json.dumps(res["rows"][name]["rounds"]))
    if args.output:
        with open(args.output, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
