#!/usr/bin/env python
"""Which CPU linear kernel is faster on this machine, per SmolLM2 weight shape (F.linear vs oneDNN's prepacked
`_linear_pointwise` vs optimum-uag's skinny kernel, at 1, 3, 4, 6, 9 and 17 rows: a decode step and verify blocks),
what the auto policy packs here (runners/packed.py `packing_pays`, `skinny_pays`), the read rate of SmolLM2's
projections from memory per kernel, SmolLM2's forward at 1-64 tokens under each packing choice (the choices
interleaved, the L3 flushed before each), and its target-only generate() with and without the auto policy's packing, interleaved, median of
the repeats. Kernels are timed on one weight (cached) and streamed over copies of it, as a forward reads weights.

    python benchmarks/bench_packing.py --output benchmarks/results/packing.json
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time

import torch

from optimum_uag.runners import packed as packing
from optimum_uag.runners import skinny

SHAPES = [(576, 576), (192, 576), (1536, 576), (576, 1536), (49152, 576)]  # q/o, k/v, gate/up, down, LM head


def microseconds(fn, reps: int) -> float:
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


@torch.inference_mode()
def kernels() -> list[dict]:
    """Each kernel timed two ways: on one weight called again and again (it stays in the core's cache), and
    streamed, a pass over copies of the weight (packing.STREAM_BYTES in all, from memory, as a forward reads its
    layers), per call."""
    out = []
    for o, i in SHAPES:
        w = torch.randn(o, i)
        copies = max(1, min(64, packing.STREAM_BYTES // (4 * o * i)))
        ws = [w] + [w.clone() for _ in range(copies - 1)]
        pks = [torch.ops.mkldnn._reorder_linear_weight(v) for v in ws]
        sks = [skinny.SkinnyWeight(v) for v in ws] if skinny.available() else []
        reps = 200 if o < 10000 else 15
        packs = packing.packing_pays(o, i)
        row = {"shape": [o, i], "auto_policy_packs": packs,
               "auto_policy_skinny_blocks": bool(sks) and packing.skinny_pays(o, i, packs)}
        row["auto_policy_skinny_few_rows"] = row["auto_policy_skinny_blocks"] and packing.skinny_pays(o, i, packs,
                                                                                                       few=True)
        for rows in (1, 3, 4, 6, 9, 17):
            x = torch.randn(1, rows, i)
            cached = {"F.linear": microseconds(lambda: torch.nn.functional.linear(x, w), reps),
                      "packed": microseconds(lambda: packing._linear(pks[0], None, x), reps)}
            streamed = {"F.linear": microseconds(lambda: [torch.nn.functional.linear(x, v) for v in ws], 7) / copies,
                        "packed": microseconds(lambda: [packing._linear(v, None, x) for v in pks], 7) / copies}
            if sks:
                cached["skinny"] = microseconds(lambda: sks[0](x), reps)
                streamed["skinny"] = microseconds(lambda: [v(x) for v in sks], 7) / copies
            row[f"rows_{rows}_us"] = {k: round(v, 1) for k, v in cached.items()}
            row[f"rows_{rows}_us_streamed"] = {k: round(v, 1) for k, v in streamed.items()}
        out.append(row)
    return out


@torch.inference_mode()
def projections_from_memory(row_counts=(1, 2, 3, 4, 8, 9, 17), passes: int = 9) -> dict:
    """The read rate (GB/s) of SmolLM2's 210 projections (30 layers x q, k, v, o, gate, up, down: 425 MB of distinct
    weights, more than this CPU's L3 keeps between passes) through F.linear (MKL) and the skinny kernel, the two
    alternating pass by pass, median of the passes: how close each kernel runs to the memory's rate, per rows."""
    gen = torch.Generator().manual_seed(0)
    shapes = [(576, 576), (192, 576), (192, 576), (576, 576), (1536, 576), (1536, 576), (576, 1536)]
    weights = [torch.randn(o, i, generator=gen) for _ in range(30) for o, i in shapes]
    total = sum(w.numel() * 4 for w in weights)
    kernels = {"F.linear": weights}
    if skinny.available():
        kernels["skinny"] = [skinny.SkinnyWeight(w) for w in weights]
    out = {"megabytes": round(total / 1e6, 1), "gb_per_s": {}}
    for rows in row_counts:
        xs = {i: torch.randn(rows, i, generator=gen) for i in (576, 1536)}
        times = {name: [] for name in kernels}
        for rep in range(passes + 1):
            for name, ws in kernels.items():
                t0 = time.perf_counter()
                if name == "F.linear":
                    for w in ws:
                        torch.nn.functional.linear(xs[w.shape[1]], w)
                else:
                    for k in ws:
                        k(xs[k.in_features])
                if rep:
                    times[name].append(time.perf_counter() - t0)
        out["gb_per_s"][rows] = {name: round(total / statistics.median(t) / 1e9, 1) for name, t in times.items()}
    return out


PACKINGS = {  # which linears a forward runs packed, and whether blocks of rows run on the skinny kernel: the auto
    # policy's measured choice, and fixed choices (oneDNN's packing only)
    "auto policy": (None, None),
    "auto policy, skinny kernel for blocks only": (None, "blocks"),
    "auto policy, no skinny kernel": (None, False),
    "LM head only": (lambda o, i: o * i >= 1 << 24, False),
    "every eligible linear": (lambda o, i: True, False),
}


FLUSH_BYTES = 1 << 30


@torch.no_grad()
def forward_by_packing(repeats: int, widths=(1, 2, 3, 4, 6, 9, 17, 33, 64), context: int = 250) -> dict:
    """SmolLM2's forward (the static runner, `context` tokens cached) at each width under each packing choice,
    the choices interleaved per width and repetition; ms and the cost against the auto policy's one-token forward."""
    from optimum_uag.models import smollm2
    from optimum_uag.runners.registry import RUNNERS, select_runner
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(smollm2(), dtype=torch.float32).eval()
    kind = select_runner(model, strict=True)
    runners, modules, skinny_modules, few_modules = {}, {}, {}, {}
    for name, (select, use_skinny) in PACKINGS.items():
        pack = packing.PackedWeights(model, measured=select is None, select=select,
                                     use_skinny=None if use_skinny == "blocks" else use_skinny,
                                     few=use_skinny != "blocks")
        runners[name] = RUNNERS[kind](model, 1, context + max(widths) + 8, torch.zeros(1, dtype=torch.long))
        runners[name].call = packing.PackedCall(model, pack)
        modules[name] = len(pack.onednn)
        skinny_modules[name] = pack.skinny
        few_modules[name] = pack.skinny_few
    gen = torch.Generator().manual_seed(0)
    ids = lambda n: torch.randint(0, model.config.vocab_size, (1, n), generator=gen)  # noqa: E731
    for runner in runners.values():
        runner.forward(ids(context), torch.zeros(1, dtype=torch.long))
    start = torch.full((1,), context, dtype=torch.long)
    # Before each timed forward a pass over 1 GiB of other memory: this CPU's L3 (480 MiB on the Intel Xeon) would
    # otherwise keep the weights the choice before it read, and choices that share the model's own weights (F.linear)
    # would find them warm while one reading its own packed copies found them cold.
    flush = torch.ones(FLUSH_BYTES // 4)
    times = {(name, w): [] for name in runners for w in widths}
    for rep in range(repeats + 2):
        for w in widths:
            for name, runner in runners.items():
                tokens = ids(w)
                flush.sum()
                t0 = time.perf_counter()
                runner.forward(tokens, start, logits_to_keep=w).cpu()
                if rep >= 2:
                    times[name, w].append(time.perf_counter() - t0)
    one = statistics.median(times["auto policy", 1])
    return {name: {"packed_modules": modules[name], "skinny_modules": len(skinny_modules[name]),
                   "skinny_few_rows_modules": len(few_modules[name]),
                   "ms": {w: round(statistics.median(times[name, w]) * 1e3, 1) for w in widths},
                   "vs_auto_one_token": {w: round(statistics.median(times[name, w]) / one, 2) for w in widths}}
            for name in runners}


def generate_rates(repeats: int, new_tokens: int) -> dict:
    from optimum_uag.models import chat_prompts, smollm2
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = smollm2()
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    text = tok.apply_chat_template([{"role": "user", "content": chat_prompts()[0]}], add_generation_prompt=True,
                                   tokenize=False)
    enc = tok(text, return_tensors="pt", add_special_tokens=False, return_token_type_ids=False)
    gen = dict(do_sample=False, max_new_tokens=new_tokens, min_new_tokens=new_tokens, pad_token_id=tok.pad_token_id)
    pack = packing.packed_weights(model)

    def plain():
        return model.generate(**enc, **gen)

    def packed():
        with pack:
            return model.generate(**enc, **gen)

    rows = {"generate": plain, "generate, auto-packed": packed} if pack is not None else {"generate": plain}
    for fn in rows.values():
        fn()
    rates = {name: [] for name in rows}
    for _ in range(repeats):
        for name, fn in rows.items():
            t0 = time.perf_counter()
            fn()
            rates[name].append(new_tokens / (time.perf_counter() - t0))
    return {"packed_modules": len(pack.modules) if pack is not None else 0,
            "tokens_per_s": {name: round(statistics.median(v), 2) for name, v in rates.items()}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--max_new_tokens", type=int, default=64)
    p.add_argument("--forward_repeats", type=int, default=12)
    p.add_argument("--output", default=None)
    args = p.parse_args()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in subprocess.run(
            ["lscpu"], capture_output=True, text=True).stdout.splitlines() if line.startswith("Model name"))
    except (OSError, StopIteration):
        cpu = platform.processor()
    result = {"date": time.strftime("%Y-%m-%d"), "cpu": cpu, "threads": torch.get_num_threads(),
              "torch": torch.__version__, "kernels": kernels(), "projections_from_memory": projections_from_memory(),
              "smollm2_forward_by_packing": forward_by_packing(args.forward_repeats),
              "smollm2_target_only": generate_rates(args.repeats, args.max_new_tokens),
              "command": " ".join(["python", "benchmarks/bench_packing.py", *sys.argv[1:]])}
    print(json.dumps(result, indent=1))
    if args.output:
        with open(args.output, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
