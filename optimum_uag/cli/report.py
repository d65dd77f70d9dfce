"""The generate command's report: the dict written to results.json and its printout (one row per method)."""
from __future__ import annotations

ROW_TITLES = {"optimum_uag": "optimum-uag", "optimum_uag_uag": "optimum-uag UAG",
              "transformers_assisted": "transformers assisted", "target_only": "target-only",
              "target_only_packed": "target-only (prepacked)"}


TARGET_ONLY = ("target_only", "target_only_packed")  # transformers' generate(); the same on prepacked CPU weights


def best_target_only(rows: dict) -> str:
    """The fastest target-only row measured in this run: the baseline every speedup is reported against."""
    return max((name for name in TARGET_ONLY if name in rows), key=lambda name: rows[name].tokens_per_s)


def row_summary(row, rows: dict, greedy: bool) -> dict:
    """tok/s; speedup vs the fastest target-only row and vs transformers' plain generate(); for optimum-uag rows
    tau, acceptance, where the time went."""
    best, plain = rows[best_target_only(rows)].tokens_per_s, rows["target_only"].tokens_per_s
    out = {"tokens_per_s": row.tokens_per_s,
           "speedup_vs_best_target_only": row.tokens_per_s / best if best else None,
           "speedup_vs_transformers_generate": row.tokens_per_s / plain if plain else None}
    m = row.metrics
    if m is not None:
        total = m.seconds
        out.update(tau=m.tau, acceptance_rate=m.acceptance_rate, target_calls=m.target_calls,
                   draft_share=(m.draft_seconds + m.translate_seconds) / total if total else 0.0,
                   translate_share=m.translate_seconds / total if total else 0.0,
                   verify_share=m.verify_seconds / total if total else 0.0)
        if m.adaptive_rounds:  # the adaptive draft length's choices (engine/policy.py)
            out["mean_draft_length"] = m.mean_draft_length
            out["rounds_without_draft_share"] = m.rounds_without_draft / m.adaptive_rounds
        if m.tree_shapes:  # (depth, top_k, nodes) of the draft trees, and the share of rounds that drafted one
            out["draft_tree"] = [list(shape) for shape in m.tree_shapes]
            out["tree_rounds_share"] = m.tree_rounds / m.target_calls if m.target_calls else 0.0
    if greedy and row is not rows["target_only"]:  # every other row's greedy output against target-only's
        out["outputs_match_target"] = not row.mismatched
        d = row.divergence
        if d["rows"]:
            out["rows_differing"] = f"{d['rows_differing']}/{d['rows']}"
            out["token_mismatch_rate"] = round(d["tokens_after"] / max(1, d["tokens"]), 6)
    return out


def _versions() -> dict:
    """The library versions the numbers were measured with."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("optimum-uag", "torch", "transformers", "optimum-habana"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            pass
    return out


def build_report(setup, rows: dict, source: str, encoded: list) -> dict:
    """results.json: the main row's numbers at the top level (as before), every row under `rows`."""
    from .. import distributed
    from ..quantization import finalize_measurements

    args, notes = setup.args, setup.notes
    greedy = not args.do_sample
    main = "optimum_uag" if "optimum_uag" in rows else "target_only"
    summaries = {name: row_summary(row, rows, greedy) for name, row in rows.items()}
    if "transformers_assisted" in rows:
        pair = _baseline_pair(rows)
        theirs = rows["transformers_assisted"].tokens_per_s
        summaries[pair]["speedup_vs_transformers_assisted"] = rows[pair].tokens_per_s / theirs if theirs else None
    top = summaries[main]
    report = {
        "throughput_tokens_per_s": top["tokens_per_s"], "target_only_tokens_per_s": rows["target_only"].tokens_per_s,
        "best_target_only": best_target_only(rows),
        "best_target_only_tokens_per_s": rows[best_target_only(rows)].tokens_per_s,
        "speedup_vs_best_target_only": top["speedup_vs_best_target_only"],
        "speedup_vs_transformers_generate": top["speedup_vs_transformers_generate"], "generated_tokens": rows[main].tokens,
        "world_size": setup.world_size, "prompt_source": source, "notes": notes, "target": setup.target_path,
        "assistant": setup.drafts["optimum_uag"][2] if "optimum_uag" in setup.drafts else None,
        "uag_assistant": setup.drafts["optimum_uag_uag"][2] if "optimum_uag_uag" in setup.drafts else None,
        "device": str(setup.device), "versions": _versions(), "args": vars(args), "rows": summaries,
        "warmup_seconds": {name: row.warmup_seconds for name, row in rows.items()},
    }
    for key in ("tau", "acceptance_rate", "target_calls", "translate_share", "draft_share", "outputs_match_target",
                "rows_differing", "token_mismatch_rate", "speedup_vs_transformers_assisted", "draft_tree",
                "mean_draft_length", "rounds_without_draft_share"):
        if key in top:
            report[key] = top[key]
    if rows[main].metrics is not None:
        m = rows[main].metrics
        report["graph_captures"] = {"target": len(m.target_shapes), "assistant": len(m.draft_shapes)}
        if m.target_cache_bytes:  # (Gaudi) the KV caches of our runners, and of optimum-habana's own target-only run
            from ..gaudi.runner import own_cache_bytes

            report["kv_cache_bytes"] = {"target": m.target_cache_bytes, "assistant": m.draft_cache_bytes or None,
                                        "target_only": own_cache_bytes(setup.model) or None}
        report["acceptance_per_iteration"] = [round(a / d, 6) if d else 0.0 for a, d in
                                              (rows[main].per_iteration[i] for i in sorted(rows[main].per_iteration))]
        if greedy:
            report["mismatched_batches"] = rows[main].mismatched
    if args.torch_compile:
        from ..runners.compile import compile_stats

        drafts = [d for d, _, _ in setup.drafts.values() if hasattr(d, "generation_config")]
        report["compile"] = {"target": compile_stats(setup.model),
                             "assistant": compile_stats(drafts[0]) if drafts else None,
                             "note": "seconds of calls that compiled a graph (optimum-uag); the target-only "
                                     "baseline's compilation is inside its warmup_seconds"}
    if setup.emulator is not None:
        report["device"] = "hpu (emulated on CPU)"
        if args.use_hpu_graphs:  # what the emulator saw, per run (warmup included)
            report["graph_captures"] = rows[main].captures
            report["baseline_graph_captures"] = rows["target_only"].captures
            report["graph_capture_log"] = [[name, shapes] for name, shapes in setup.emulator.capture_log]
    if finalize_measurements(setup.model):
        notes.append("FP8 measurement dumped; rerun with QUANT_CONFIG pointing at the matching quantize config")
    for draft, _, _ in setup.drafts.values():
        if hasattr(draft, "generation_config") and finalize_measurements(draft):
            notes.append("assistant FP8 measurement dumped; rerun with --assistant_quant_config pointing at the "
                         "matching quantize config (e.g. maxabs_quant_assistant.json)")
    if setup.world_size > 1:  # every rank decoded the same tokens (sharded target, replicated draft, same seed)
        report["ranks_agree"] = distributed.ranks_agree(rows[main].last)
        report["assistant_sharded"] = bool(args.shard_assistant)
        report["target_loaded_on_meta"] = setup.target_on_meta
    report["output_ids"] = [row[encoded[-1]["input_ids"].shape[1]:] for row in rows[main].last.tolist()]
    report["sample_text"] = setup.tokenizer.decode(report["output_ids"][0], skip_special_tokens=True)
    return report


def _baseline_pair(rows) -> str:
    """The optimum-uag row that transformers' assisted generation ran the same pair as."""
    return "optimum_uag_uag" if "optimum_uag_uag" in rows else "optimum_uag"


def print_report(report: dict) -> None:
    print("=" * 78)
    print(f"target     {report['target']}")
    print(f"assistant  {report['assistant'] or '(none)'}   device {report['device']}")
    if report.get("uag_assistant"):
        print(f"UAG draft  {report['uag_assistant']}")
    print(f"prompts    {report['prompt_source']}")
    for note in report["notes"]:
        print(f"note: {note}")
    print("-" * 78)
    print("sample continuation:")
    print(report["sample_text"][:400])
    print("-" * 78)
    best = ROW_TITLES.get(report["best_target_only"], report["best_target_only"])
    print(f"{'row':24s} {'tok/s':>8s} {'vs best':>8s} {'vs generate':>12s} {'tau':>6s} {'accept':>7s} {'draft':>6s}")
    for name, row in report["rows"].items():
        title = ROW_TITLES.get(name, name)
        fmt = lambda key: f"{row[key]:.2f}x" if row.get(key) is not None else "-"  # noqa: E731
        tau = f"{row['tau']:.2f}" if "tau" in row else "-"
        acc = f"{row['acceptance_rate']:.0%}" if "acceptance_rate" in row else "-"
        share = f"{row['draft_share']:.0%}" if "draft_share" in row else "-"
        print(f"{title:24s} {row['tokens_per_s']:8.1f} {fmt('speedup_vs_best_target_only'):>8s} "
              f"{fmt('speedup_vs_transformers_generate'):>12s} {tau:>6s} {acc:>7s} {share:>6s}")
    print("-" * 78)
    print(f"vs best: against the fastest target-only row of this run ({best}); vs generate: against transformers' "
          "plain generate()")
    if "target_only_packed" in report["rows"]:
        print("target-only (prepacked): the target alone on the prepacked CPU weights optimum-uag's runners use")
    for name, row in report["rows"].items():
        if row.get("draft_tree"):
            depth, top_k, nodes = row["draft_tree"][0]
            print(f"{ROW_TITLES.get(name, name)}: draft tree depth {depth}, top_k {top_k}, {nodes} nodes per verify "
                  f"({row['tree_rounds_share']:.0%} of rounds)")
    for name, row in report["rows"].items():
        if "rounds_without_draft_share" in row:
            print(f"{ROW_TITLES.get(name, name)}: adaptive draft length, mean {row['mean_draft_length']:.2f} tokens "
                  f"per drafting round, {row['rounds_without_draft_share']:.0%} of rounds without a draft")
    if report.get("speedup_vs_best_target_only") is not None:
        print(f"speedup vs the fastest target-only path ({best}) {report['speedup_vs_best_target_only']:.2f}x, "
              f"vs transformers' generate() {report['speedup_vs_transformers_generate']:.2f}x  (main row: optimum-uag)")
    for name, row in report["rows"].items():
        if "speedup_vs_transformers_assisted" in row:
            print(f"speedup vs transformers assisted generation ({ROW_TITLES.get(name, name)}, same pair) "
                  f"{row['speedup_vs_transformers_assisted']:.2f}x")
    if "compile" in report:
        c = report["compile"]
        graphs = c["target"]["graphs"] + (c["assistant"] or {}).get("graphs", 0)
        seconds = c["target"]["seconds"] + (c["assistant"] or {}).get("seconds", 0.0)
        print(f"torch.compile        {graphs} graphs, {seconds:.0f} s compiling (excluded from the rates above; "
              f"warmup {report['warmup_seconds']})")
    matches = {ROW_TITLES.get(n, n): r["outputs_match_target"] for n, r in report["rows"].items()
               if "outputs_match_target" in r}
    if matches:
        print("outputs identical to target-only greedy: " + ", ".join(f"{k} {v}" for k, v in matches.items()))
    differing = {ROW_TITLES.get(n, n): r for n, r in report["rows"].items() if r.get("token_mismatch_rate")}
    for title, r in differing.items():
        print(f"{title}: rows differing from target-only {r['rows_differing']}, new tokens after the first divergence "
              f"{r['token_mismatch_rate']:.1%}" + ("" if report["args"].get("bf16") is False else
              " (bf16 rounds a K+1-row verify unlike a 1-row decode; exactness is claimed for fp32, docs/gaudi.md)"))
    print("=" * 78)
