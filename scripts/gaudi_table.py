"""Write docs/gaudi.md's class table: every causal-LM class optimum-habana's adapt_transformers_to_gaudi() installs,
as target and as draft of assisted generation on optimum-uag's Gaudi runner, and as the target of a feature head's
draft tree, under the HPU emulator (tiny random models, fp32, greedy, batch 2 with left padding, K 3). The same check as tests/test_gaudi.py
(test_every_gaudi_class_is_exact_or_refused_by_name). ~2 minutes on 2 cores.

    python scripts/gaudi_table.py [--out docs/gaudi.md]
"""
from __future__ import annotations

import argparse
import re
import warnings
from pathlib import Path

START, END = "<!-- gaudi-classes:start -->", "<!-- gaudi-classes:end -->"


def rows() -> list[dict]:
    from optimum_uag.testing import gaudi_classes

    refs = {}
    for model_type in gaudi_classes.CHECKED:
        try:
            refs[model_type] = gaudi_classes.plain_reference(model_type)
        except Exception as err:  # noqa: BLE001
            refs[model_type] = f"{type(err).__name__}: {str(err).splitlines()[0][:100]}"
    from optimum_uag.testing.hpu_emulator import HPUEmulator

    out = []
    with HPUEmulator():
        import optimum_uag.gaudi

        optimum_uag.gaudi.enable()
        for model_type, ref in refs.items():
            if isinstance(ref, str):
                out.append({"model_type": model_type, "class": "-", "target": "-", "draft": "-",
                            "reason": f"transformers cannot build a tiny one: {ref}", "matches_transformers": None})
                continue
            out.append(gaudi_classes.check(ref, refs["llama"]))
    return out


def table(results: list[dict]) -> str:
    lines = ["| model type | optimum-habana class | as target | as draft | a feature head's tree on it | "
             "class = transformers' own (no cache) | why refused |", "|---|---|---|---|---|---|---|"]
    for r in results:
        from optimum_uag.gaudi.runner import UPSTREAM_DIFFERS

        same = {True: "yes", False: "no", None: "-"}[r["matches_transformers"]]
        if r["class"] in UPSTREAM_DIFFERS:
            same = f"no: {UPSTREAM_DIFFERS[r['class']]} (optimum-habana's code, not the emulator)"
        if r.get("own_forward_error"):
            same = f"its forward fails: {r['own_forward_error'][:80]}"
        reasons = []
        for role in ("target", "draft"):
            text = r.get(f"reason_{role}") or ""
            text = re.sub(r"^\S+ \(optimum-habana [\d.]+\) cannot run in optimum-uag's static Gaudi runner ", "", text)
            text = re.sub(r"^\S+ \(optimum-habana's token_idx class\) cannot be the target of assisted generation on "
                          r"Gaudi: ", "", text)
            text = re.sub(r"^\S+ cannot run in optimum-uag's static Gaudi runner: ", "", text)
            text = text.split(". docs/gaudi.md")[0].split(", so verifying")[0].replace("|", "/")[:170]
            if text and (not reasons or text != reasons[-1][1]):
                reasons.append((role, text))
        reason = "; ".join(f"{role}: {text}" for role, text in reasons) if len(reasons) > 1 else \
            (reasons[0][1] if reasons else r.get("reason") or "")
        lines.append(f"| {r['model_type']} | {r['class']} | {r['target']} | {r['draft']} | {r.get('head', '-')} | {same} "
                     f"| {reason[:220]} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/gaudi.md")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    text = Path(args.out).read_text()
    body = table(rows())
    block = f"{START}\n{body}\n{END}"
    if START in text:
        text = re.sub(re.escape(START) + ".*?" + re.escape(END), lambda _: block, text, flags=re.S)
    else:
        raise SystemExit(f"{args.out} has no {START} ... {END} markers")
    Path(args.out).write_text(text)
    print(body)


if __name__ == "__main__":
    main()
