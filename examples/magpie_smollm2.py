#!/usr/bin/env python
"""More self-distillation data for SmolLM2's feature head: requests written by SmolLM2 itself, answered by it.

The requests are sampled from the chat template's open user turn (Magpie, Xu et al. 2024: an instruct model's
template prefix up to "<|im_start|>user\\n" makes it write a user request), so no dataset is needed and the
requests follow the target's own chat distribution. Each request is then answered greedily by SmolLM2 (the
answers greedy drafting must match). Requests equal to a held-out chat request are dropped, as are duplicates and
requests the sampler did not finish. Output: {"prompt", "answer"} lines for `optimum-uag train-draft
--dataset_name` (appended as batches finish: a time-budgeted run keeps what it made).

    python examples/magpie_smollm2.py --output W/magpie.jsonl --minutes 25 --batch 96
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", required=True)
    parser.add_argument("--minutes", type=float, default=25.0)
    parser.add_argument("--batch", type=int, default=96)
    parser.add_argument("--prompt_tokens", type=int, default=64, help="longest request sampled")
    parser.add_argument("--max_new_tokens", type=int, default=160, help="longest answer")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=2024)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from answer_smollm2 import answered, load_smollm2, write_answers
    from optimum_uag.models.prompt_sets import heldout_chat_prompts

    model, tok, end = load_smollm2()
    template = tok.apply_chat_template([{"role": "user", "content": "\x00"}], tokenize=False,
                                       add_generation_prompt=True)
    prefix = template.split("\x00")[0]  # system turn + "<|im_start|>user\n"
    prefix_ids = tok(prefix, return_tensors="pt").input_ids
    held = {p.strip() for p in heldout_chat_prompts()}
    out = Path(args.output)
    seen = answered(out)
    t0, rounds, kept, answer_tokens = time.time(), 0, 0, 0
    while time.time() - t0 < args.minutes * 60:
        torch.manual_seed(args.seed + rounds + len(seen))
        rounds += 1
        with torch.no_grad():
            req = model.generate(prefix_ids.repeat(args.batch, 1),
                                 attention_mask=torch.ones(args.batch, prefix_ids.shape[1], dtype=torch.long),
                                 do_sample=True, temperature=1.0, top_p=0.95, max_new_tokens=args.prompt_tokens,
                                 eos_token_id=end, pad_token_id=tok.pad_token_id)
        prompts = []
        for row in req[:, prefix_ids.shape[1]:].tolist():
            if end not in row:
                continue  # unfinished request
            text = tok.decode(row[: row.index(end)], skip_special_tokens=True).strip()
            if len(text) < 8 or text in held or text in seen:
                continue
            seen.add(text)
            prompts.append(text)
        if not prompts:
            continue
        prompts.sort(key=len)
        answer_tokens += write_answers(model, tok, end, prompts, args.max_new_tokens, out)
        kept += len(prompts)
        print(f"[magpie] round {rounds}: {kept} conversations, {answer_tokens} answer tokens, "
              f"{(time.time() - t0) / 60:.1f} min", flush=True)
    print(json.dumps({"conversations": kept, "answer_tokens": answer_tokens, "rounds": rounds,
                      "minutes": round((time.time() - t0) / 60, 1), "batch": args.batch,
                      "max_new_tokens": args.max_new_tokens}), flush=True)


if __name__ == "__main__":
    main()
