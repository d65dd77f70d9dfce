#!/usr/bin/env python
"""README / docs/benchmarks.md tables generated from the committed results files, so that no number can drift.

    python scripts/bench_tables.py          # rewrite the tables between their markers
    python scripts/bench_tables.py --check  # exit 1 when a table differs from what the results files give

Sources: benchmarks/results/feature_head.json (benchmarks/bench_feature_head.py; feature_head_intel*.json: the same on
an Intel Xeon), the A/B files (datastore, tree_prior*, tree_sweep_intel, verify_cost_intel),
benchmarks/results/adaptive.json
(benchmarks/bench_adaptive.py), benchmarks/results/main_job.json
(README command 1's results.json), optimum_uag/models/smollm2_head/training_log.json (the head's held-out report).
A table sits between `<!-- table:NAME -->` and `<!-- /table -->` in README.md and docs/benchmarks.md.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
FILES = [ROOT / "README.md", ROOT / "docs" / "benchmarks.md"]
DEFAULT = "head default (tree + lookup branch)"


def _load(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


def _x(v) -> str:
    return f"{v:.2f}x" if isinstance(v, (int, float)) else "-"


def _f(v, fmt="{:.2f}") -> str:
    return fmt.format(v) if isinstance(v, (int, float)) else "-"


def feature_head_table(bench: dict) -> str:
    lines = ["| group | row | batch | tok/s | vs fastest target-only | vs transformers generate() | tau | accept | "
             "draft share | exact |", "|---|---|---|---|---|---|---|---|---|---|"]
    for group, res in bench["groups"].items():
        for name, r in res["rows"].items():
            best = " (fastest)" if name == res["best_target_only"] else ""
            exact = {True: "yes", False: "**NO**"}.get(r.get("exact"), "-")
            if "sample" in group and name != "target-only":
                exact = "(sampling)"
            lines.append(f"| {group} | {name}{best} | {r['batch']} | {r['tokens_per_s']:.1f} | "
                         f"{_x(r['speedup_vs_best_target_only'])} | {_x(r['speedup_vs_transformers_generate'])} | "
                         f"{_f(r.get('tau'))} | {_f(r.get('acceptance'), '{:.0%}')} | "
                         f"{_f(r.get('draft_share'), '{:.0%}')} | {exact} |")
    return "\n".join(lines) + (f"\n\n{bench['prompts']} held-out requests per group, {bench['max_new_tokens']} new "
                               f"tokens, fp32, eager, rows interleaved per prompt, median of {bench['repeats']} "
                               f"repeats ({bench['date']}): `{bench['command']}`."
                               + (f" Merged: {bench['merged']}." if bench.get("merged") else "")
                               + (f" CPU of the groups run on {bench['date']}: {bench['cpu']}."
                                  if bench.get("cpu") else ""))


def ab_table(bench: dict) -> str:
    """An A/B results file ({"groups": {group: run_group's result + "command"}}): every row of every group."""
    lines = ["| group | row | tok/s | vs fastest target-only (per repeat) | tau | target calls | exact |",
             "|---|---|---|---|---|---|---|"]
    notes = []
    for group, res in bench["groups"].items():
        for name, r in res["rows"].items():
            exact = {True: "yes", False: "**NO**"}.get(r.get("exact"), "-")
            if "sample" in group and name != "target-only":  # sampled ids differ from target-only's own draws
                exact = "(sampling)"
            per = ", ".join(f"{v:.2f}" for v in r.get("speedup_vs_best_target_only_per_repeat", []))
            lines.append(f"| {group} | {name} | {r['tokens_per_s']:.1f} | {_x(r['speedup_vs_best_target_only'])} "
                         f"({per}) | {_f(r.get('tau'))} | {r.get('target_calls', '-')} | {exact} |")
        notes.append(f"{group}: `{res['command']}`" + (f" ({res['cpu']}, {res['date']})" if res.get("cpu") else ""))
    return "\n".join(lines) + "\n\n" + "; ".join(notes) + "."


def _status(value, goal, points: bool = False) -> str:
    """'met' or 'missed by D' (three decimals where two would round to 0.00; `points`: a share, in points)."""
    if value is None:
        return "not measured"
    if value >= goal:
        return "met"
    gap = goal - value
    if points:
        return f"missed by {100 * gap:.1f} points"
    return f"missed by {gap:.2f}" if gap >= 0.005 else f"missed by {gap:.3f} ({value:.3f}x)"


def goals_table(bench: dict | None, main: dict | None, log: dict | None) -> str:
    rows = []
    g = (bench or {}).get("groups", {})

    def row(group, name, key="speedup_vs_best_target_only"):
        return g.get(group, {}).get("rows", {}).get(name, {}).get(key)

    chat = row("chat@1", DEFAULT)
    chat_tau = row("chat@1", DEFAULT, "tau")
    rows.append(("chat, batch 1, default draft (tree)", ">= 1.5x, tau >= 3.0",
                 f"{_x(chat)}, tau {_f(chat_tau)}", _status(chat, 1.5) + "; tau " + _status(chat_tau, 3.0)))
    grounded = row("grounded@1", DEFAULT)
    rows.append(("input-grounded, batch 1", ">= 2.0x", _x(grounded), _status(grounded, 2.0)))
    sample = row("sample@1", DEFAULT)
    rows.append(("sampling T=0.7, batch 1 (vs prepacked sampling)", ">= 1.3x", _x(sample), _status(sample, 1.3)))
    b4 = next((r.get("speedup_vs_best_target_only") for n, r in g.get("chat@4", {}).get("rows", {}).items()
               if n.startswith("head default")), None)
    rows.append(("batch 4, chat", ">= 1.2x", _x(b4), _status(b4, 1.2)))
    job = (main or {}).get("speedup_vs_best_target_only")
    rows.append(("README main job (vs fastest target-only)", ">= 1.5x", _x(job), _status(job, 1.5)))
    chain = next((r.get("tau") for n, r in g.get("chat@1", {}).get("rows", {}).items() if "chain" in n), None)
    tree = row("chat@1", "head tree, no lookup", "tau")
    ratio = tree / chain if tree and chain else None
    wide_name = next((n for n in g.get("chat@1", {}).get("rows", {}) if n.startswith("head tree (")), None)
    wide = row("chat@1", wide_name, "tau") if wide_name else None
    if wide and chain:  # EAGLE-2's comparison (a wide tree), with the equal-width one beside it
        shape = wide_name.split(")")[0] + ")"
        rows.append(("tree vs chain, same head, chat (tau)", ">= 1.25x",
                     f"{_x(wide / chain)}: tree {shape.removeprefix('head tree ')} {_f(wide)} vs chain K=5 {_f(chain)} "
                     f"(default tree (3, 2, 5), as many verify columns as the chain: {_x(ratio)}, {_f(tree)})",
                     _status(wide / chain, 1.25)))
    else:
        rows.append(("tree vs chain, same head, chat (tau)", ">= 1.25x", f"{_x(ratio)} ({_f(tree)} vs {_f(chain)})",
                     _status(ratio, 1.25)))
    agree = ((log or {}).get("heldout") or {}).get("top1", [None])[0]
    rows.append(("head first-token agreement, held-out answers, split by prompt", ">= 60%",
                 _f(agree, "{:.1%}"), _status(agree, 0.60, points=True) if agree is not None else "not measured"))
    uag = row("uag@1", "optimum-uag UAG K=5", "speedup_vs_transformers_assisted")
    rows.append(("UAG vs transformers' UAG, same pair", "> 1.0x", _x(uag), _status(uag, 1.0001)))
    lines = ["| row | goal | measured | status |", "|---|---|---|---|"]
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
    return "\n".join(lines)


def main_job_table(main: dict) -> str:
    titles = {"target_only": "target-only (transformers generate)", "target_only_packed": "target-only, prepacked",
              "optimum_uag": "optimum-uag, feature head", "optimum_uag_uag": "optimum-uag UAG",
              "transformers_assisted": "transformers UAG"}
    lines = ["| row | tok/s | vs fastest target-only | vs transformers generate() | tau | rounds without draft | exact |",
             "|---|---|---|---|---|---|---|"]
    for name, r in main["rows"].items():
        exact = {True: "yes", False: "**NO**"}.get(r.get("outputs_match_target"), "-")
        lines.append(f"| {titles.get(name, name)} | {r['tokens_per_s']:.1f} | {_x(r['speedup_vs_best_target_only'])} | "
                     f"{_x(r['speedup_vs_transformers_generate'])} | {_f(r.get('tau'))} | "
                     f"{_f(r.get('rounds_without_draft_share'), '{:.0%}')} | {exact} |")
    tree = main["rows"].get("optimum_uag", {}).get("draft_tree")
    shape = f"; draft tree depth {tree[0][0]}, top_k {tree[0][1]}, {tree[0][2]} nodes" if tree else ""
    versions = ", ".join(f"{k} {v}" for k, v in main.get("versions", {}).items())
    failed = [n.split(" (")[0] for n in main.get("notes", []) if "(a comparison row) failed" in n]
    machine = f" on {main['machine']}" if main.get("machine") else ""
    extra = (f" Measured with {versions}{machine}." if versions else "") + (
        " transformers' own UAG row failed inside transformers on this run (its note in the results file)."
        if failed else "")
    return "\n".join(lines) + f"\n\nFastest target-only row: `{main['best_target_only']}`{shape}.{extra}"


def adaptive_table(bench: dict) -> str:
    """benchmarks/bench_adaptive.py: per pair, every row against the fastest target-only path and transformers'."""
    lines = ["| pair | row | tok/s | vs fastest target-only | vs transformers (default policy) | vs our fixed K | tau | "
             "mean K | rounds without draft | exact |", "|---|---|---|---|---|---|---|---|---|---|"]
    for group, res in bench["groups"].items():
        for name, r in res["rows"].items():
            best = " (fastest)" if name == res["best_target_only"] else ""
            exact = {True: "yes", False: "**NO**"}.get(r.get("exact"), "-")
            if "sample" in group and name != "target-only":
                exact = "(sampling)"
            lines.append(f"| {group} | {name}{best} | {r['tokens_per_s']:.1f} | {_x(r['speedup_vs_best_target_only'])} | "
                         f"{_x(r.get('speedup_vs_transformers_assisted'))} | {_x(r.get('vs_fixed'))} | "
                         f"{_f(r.get('tau'))} | {_f(r.get('mean_draft_length'), '{:.1f}')} | "
                         f"{_f(r.get('rounds_without_draft_share'), '{:.0%}')} | {exact} |")
    counts = ", ".join(f"{g} {res['prompts']}" for g, res in bench["groups"].items())
    return "\n".join(lines) + (f"\n\nChat requests per pair ({counts}), {bench['max_new_tokens']} new tokens, fp32, "
                               f"eager, rows interleaved per prompt, median of {bench['repeats']} repeats "
                               f"({bench.get('merged', bench['date'])}): `{bench['command']}`.")


def adaptive_goals(bench: dict) -> str:
    """Issue 31's goals per pair: >= 1.0x transformers', >= 0.95x the fastest target-only path."""
    lines = ["| pair | adaptive vs fastest target-only (goal >= 0.95x) | vs transformers (goal >= 1.0x) | vs our fixed K |",
             "|---|---|---|---|"]
    for group, res in bench["groups"].items():
        r = res["rows"]["optimum-uag adaptive"]
        best, hf = r["speedup_vs_best_target_only"], r.get("speedup_vs_transformers_assisted")
        lines.append(f"| {group} | {_x(best)} ({_status(best, 0.95)}) | "
                     f"{_x(hf) + ' (' + _status(hf, 1.0) + ')' if hf is not None else '- (no transformers row)'} | "
                     f"{_x(r.get('vs_fixed'))} |")
    return "\n".join(lines)


def tables() -> dict:
    bench = _load(RESULTS / "feature_head.json")
    bench = bench if bench and "groups" in bench else None  # (a results file of the earlier, one-block layout)
    main = _load(RESULTS / "main_job.json")
    log = _load(ROOT / "optimum_uag" / "models" / "smollm2_head" / "training_log.json")
    out = {"goals": goals_table(bench, main, log)}
    if bench is not None:
        out["feature_head"] = feature_head_table(bench)
    if main is not None:
        out["main_job"] = main_job_table(main)
    # the same benchmark on an Intel Xeon
    for name in ("feature_head_intel", "feature_head_intel_device_tree", "feature_head_intel_draft_cost",
                 "feature_head_intel_skinny", "feature_head_intel_two_streams", "feature_head_intel_bf16_head"):
        intel = _load(RESULTS / f"{name}.json")
        if intel is not None:
            out[name] = feature_head_table(intel)
    # A/B scripts
    for name in ("datastore", "tree_prior", "tree_prior_decay", "tree_default_adaptive_intel", "tree_first",
                 "draft_precision"):
        ab = _load(RESULTS / f"{name}.json")
        if ab is not None:
            out[name] = ab_table(ab)
    reach = _load(RESULTS / "gate_reach_intel.json")  # benchmarks/bench_gate_reach.py
    if reach is not None:
        out["gate_reach_intel"] = ab_table({"groups": {f"chat@4, {reach['prompts']} requests": reach}})
    line = _load(RESULTS / "cost_line.json")  # benchmarks/bench_cost_line.py, {"runs": [results of one run]}
    if line is not None:
        out["cost_line"] = ab_table({"groups": {f"chat@4, run {i + 1}": run for i, run in enumerate(line["runs"])}})
        lines = ["| run | row | mean K | K: rounds | round time / t0 at K | line c / s (of t0) | rounds without a draft |",
                 "|---|---|---|---|---|---|---|"]
        for i, run in enumerate(line["runs"]):
            for name, row in run["rows"].items():
                r = row.get("rounds")
                if not r:
                    continue
                hist = ", ".join(f"{k}: {n}" for k, n in r.get("k_histogram", {}).items())
                rel = ", ".join(f"{k}: {v:.2f}" for k, v in r["round_seconds_over_t0_median"].items())
                fit = r.get("line_over_t0_median")
                fit = f"{fit['c']:.2f} / {fit['s']:.2f}" if fit else "-"
                lines.append(f"| {i + 1} | {name} | {r.get('mean_k', 0):.2f} | {hist} | {rel} | {fit} | "
                             f"{r['rounds_without_draft']} of {r['rounds_without_draft'] + r['drafting_rounds']} |")
        out["cost_line_rounds"] = "\n".join(lines) + (
            "\n\nEach adaptive row's rounds over every repeat (the medians per K of a round's time over the t0 of "
            "its time; the fitted line where one was in use).")
    curve = _load(RESULTS / "verify_cost_intel.json")  # benchmarks/bench_verify_cost.py
    if curve is not None:
        widths = list(curve["runs"][0]["relative"])
        out["verify_cost_intel"] = "\n".join(
            ["| run | " + " | ".join(f"W={w}" for w in widths) + " |", "|---" * (len(widths) + 1) + "|"]
            + [f"| {i + 1} | " + " | ".join(f"{run['relative'][w]:.2f}" for w in widths) + " |"
               for i, run in enumerate(curve["runs"])]) + (
            f"\n\nOne forward of W tokens against one of 1 token, {curve['runs'][0]['context']} tokens cached, the "
            f"widths interleaved ({curve['cpu']}, {curve['date']}): `{curve['command']}`.")
    for name in ("tree_sweep_intel", "tree_sweep_intel_skinny"):  # benchmarks/bench_tree_sweep.py on an Intel Xeon
        sweep = _load(RESULTS / f"{name}.json")
        if sweep is not None:
            out[name] = ab_table({"groups": {"held-out chat@1, fixed trees": dict(
                sweep["held_out_chat"], command=sweep["command"], cpu=sweep["cpu"], date=sweep["date"])}})
    prof = _load(RESULTS / "round_profile_intel.json")  # benchmarks/bench_round_profile.py
    if prof is not None:
        out["round_profile_intel"] = "\n".join(
            ["| stage | ms a round | of a target-only step | calls a round |", "|---|---|---|---|",
             f"| the whole round | {prof['round_ms']:.1f} | {prof['round_in_target_only_steps']:.3f} | 1 |"]
            + [f"| {label.strip() if not label.startswith('  ') else '- ' + label.strip()} | {row['ms_per_round']:.2f} | "
               f"{row['share_of_a_target_only_step']:.3f} | {row['calls_per_round']:.2f} |"
               for label, row in prof["stages"].items()]) + (
            f"\n\nThe target-only step: {prof['target_only_step_ms']:.1f} ms (transformers' generate() on the prepacked "
            f"weights, per token, interleaved per request); tau {prof['tau']:.2f} over {prof['rounds']} target calls "
            f"(the prefills included), {prof['prompts']} chat requests x {prof['repeats']} ({prof['cpu']}, "
            f"{prof['date']}): `{prof['command']}`.")
    for name, suffix in (("packing.json", ""), ("packing_two_streams.json", "_two_streams")):
        out.update(skinny_tables(_load(RESULTS / name), suffix))  # benchmarks/bench_packing.py
    plain = _load(RESULTS / "plain_round.json")
    if plain is not None:
        out["plain_round"] = "\n".join(
            ["| batch | round without a draft vs the prepacked generate() step | exact |", "|---|---|---|"]
            + [f"| {b} | {_x(plain[f'batch_{b}']['plain_round_speed_vs_prepacked_generate'])} | "
               f"{'yes' if plain[f'batch_{b}']['exact'] else '**NO**'} |" for b in (1, 4)]) + (
            f"\n\n{plain['prompts']} chat requests, {plain['max_new_tokens']} new tokens, median of "
            f"{plain['repeats']} interleaved repeats ({plain['date']}): `{plain['command']}`.")
    adaptive = _load(RESULTS / "adaptive.json")
    if adaptive is not None:
        out["adaptive"] = adaptive_table(adaptive)
        out["adaptive_goals"] = adaptive_goals(adaptive)
    return out


def skinny_tables(pack: dict | None, suffix: str) -> dict:
    """benchmarks/bench_packing.py's results: SmolLM2's forward per kernel choice, the kernels per weight shape."""
    out: dict = {}
    if pack is None or "auto policy, no skinny kernel" not in pack.get("smollm2_forward_by_packing", {}):
        return out
    fwd = pack["smollm2_forward_by_packing"]
    widths = list(fwd["auto policy"]["ms"])
    one = fwd["auto policy, no skinny kernel"]["ms"][widths[0]]
    out["skinny_forward" + suffix] = "\n".join(
        ["| kernels | " + " | ".join(f"W={w}" for w in widths) + " |", "|---" * (len(widths) + 1) + "|"]
        + [f"| {name} | " + " | ".join(f"{row['ms'][w]:.1f} ms ({row['ms'][w] / one:.2f})" for w in widths) + " |"
           for name, row in fwd.items()]) + (
        f"\n\nSmolLM2-135M's forward of W tokens (the static runner, 250 tokens cached), each kernel choice "
        f"interleaved per width and repetition; in brackets against the one-token forward without the skinny "
        f"kernel ({pack['cpu']}, {pack['date']}): `{pack['command']}`.")
    stream = pack.get("projections_from_memory")
    if stream:
        counts = list(stream["gb_per_s"])
        out["skinny_bandwidth" + suffix] = "\n".join(
            ["| kernel | " + " | ".join(f"{r} row{'s' if r != '1' else ''}" for r in counts) + " |",
             "|---" * (len(counts) + 1) + "|"]
            + [f"| {name} | " + " | ".join(f"{stream['gb_per_s'][r][name]:.1f}" for r in counts) + " |"
               for name in stream["gb_per_s"][counts[0]]]) + (
            f"\n\nGB/s: SmolLM2's 210 projections ({stream['megabytes']:.0f} MB of distinct weights) per pass, the "
            f"kernels alternating pass by pass, median ({pack['cpu']}, {pack['threads']} threads, {pack['date']}).")
    shapes = [k for k in pack["kernels"] if "skinny" in k.get("rows_1_us_streamed", {})]
    rows = [r for r in (1, 3, 4, 9, 17) if f"rows_{r}_us_streamed" in shapes[0]] if shapes else []
    few = bool(shapes) and "auto_policy_skinny_few_rows" in shapes[0]
    if shapes:
        out["skinny_kernels" + suffix] = "\n".join(
            ["| shape | blocks on the skinny kernel here | " + ("1-3 rows on it here | " if few else "") + " | ".join(
                f"{r} row{'s' if r > 1 else ''}: F.linear / oneDNN / skinny (us)" for r in rows) + " |",
             "|---" * (len(rows) + 2 + few) + "|"]
            + [f"| {k['shape'][0]} x {k['shape'][1]} | {'yes' if k['auto_policy_skinny_blocks'] else 'no'} | "
               + (f"{'yes' if k['auto_policy_skinny_few_rows'] else 'no'} | " if few else "")
               + " | ".join(" / ".join(f"{k[f'rows_{r}_us_streamed'][n]:.0f}" for n in ("F.linear", "packed", "skinny"))
                            for r in rows) + " |" for k in shapes]) + (
            "\n\nEach kernel streamed over copies of the weight (64 MB in all, as a forward reads its layers), "
            f"median per call ({pack['cpu']}, {pack['threads']} threads, {pack['date']}).")
    return out


def render(text: str, generated: dict) -> str:
    def sub(match):
        name = match.group(1)
        if name not in generated:
            return match.group(0)
        return f"<!-- table:{name} -->\n{generated[name]}\n<!-- /table -->"

    return re.sub(r"<!-- table:(\w+) -->.*?<!-- /table -->", sub, text, flags=re.S)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--check", action="store_true")
    args = p.parse_args()
    generated = tables()
    stale = []
    for path in FILES:
        text = path.read_text(encoding="utf-8")
        unknown = sorted(set(re.findall(r"<!-- table:(\w+) -->", text)) - set(generated))
        if unknown:  # a marker no results file fills (a name not in tables(), or its file missing)
            print(f"{path.name}: no table for {', '.join(unknown)}", file=sys.stderr)
            return 1
        new = render(text, generated)
        if new != text:
            stale.append(path.name)
            if not args.check:
                path.write_text(new, encoding="utf-8")
    if args.check and stale:
        print(f"tables out of date in {', '.join(stale)}: run python scripts/bench_tables.py", file=sys.stderr)
        return 1
    print("tables " + ("up to date" if not stale else f"rewritten in {', '.join(stale)}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
