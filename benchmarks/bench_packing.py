#!/usr/bin/env python
"""Which CPU linear kernel is faster on this machine, per SmolLM2 weight shape (F.linear vs oneDNN's prepacked
`_linear_pointwise`, at 1, 6 and 9 rows: a decode step and verify blocks), what the auto policy packs here
(runners/packed.py `packing_pays`), and SmolLM2's target-only generate() with and without that packing,
interleaved, median of the repeats.

    python benchmarks/bench_packing.py --output benchmarks/results/packing.json
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import time

import torch

from optimum_uag.runners import packed as packing

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
    out = []
    for o, i in SHAPES:
        w = torch.randn(o, i)
        pk = torch.ops.mkldnn._reorder_linear_weight(w)
        reps = 200 if o < 10000 else 15
        row = {"shape": [o, i], "auto_policy_packs": packing.packing_pays(o, i)}
        for rows in (1, 6, 9):
            x = torch.randn(1, rows, i)
            plain = microseconds(lambda: torch.nn.functional.linear(x, w), reps)
            packed = microseconds(lambda: packing._linear(pk, None, x), reps)
            row[f"rows_{rows}_us"] = {"F.linear": round(plain, 1), "packed": round(packed, 1)}
        out.append(row)
    return out


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
    p.add_argument("--output", default=None)
    args = p.parse_args()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in subprocess.run(
            ["lscpu"], capture_output=True, text=True).stdout.splitlines() if line.startswith("Model name"))
    except (OSError, StopIteration):
        cpu = platform.processor()
    result = {"date": time.strftime("%Y-%m-%d"), "cpu": cpu, "threads": torch.get_num_threads(),
              "torch": torch.__version__, "kernels": kernels(),
              "smollm2_target_only": generate_rates(args.repeats, args.max_new_tokens),
              "command": "python benchmarks/bench_packing.py --output benchmarks/results/packing.json"}
    print(json.dumps(result, indent=1))
    if args.output:
        with open(args.output, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
