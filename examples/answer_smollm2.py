#!/usr/bin/env python
"""SmolLM2's own answers (greedy, or sampled for more contexts) to a pool of chat requests, for `optimum-uag
train-draft --dataset_name`.

The feature head must predict what SmolLM2 answers greedily, so its training answers are SmolLM2's own. Batches of
requests of similar length are answered by transformers' generate() on the prepacked CPU weights optimum-uag's
runners use (runners/packed.py: ~1.3x the plain weights at batch 32 on an AMD EPYC), and appended as each batch
finishes: a time-budgeted run keeps what it made, and a rerun continues where it stopped.

    python examples/answer_smollm2.py --pool head --output W/answers.jsonl --minutes 30 --batch 32
    python examples/answer_smollm2.py --pool head --output W/sampled.jsonl --temperature 0.7   # a sampled pass

The head is trained on the target's own next-token distribution at every answer position (train-draft's features),
so a sampled answer is as good a training context as a greedy one: a sampled pass over the same requests adds
contexts the greedy answers never reach (what drafting meets when users sample).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import time
from pathlib import Path

import torch


def load_smollm2(dtype=torch.float32):
    """SmolLM2 (eval; fp32 unless told), its tokenizer padding on the left, and its end-of-turn id."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from optimum_uag.models import smollm2

    path = smollm2()
    tok = AutoTokenizer.from_pretrained(path)
    tok.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=dtype).eval()
    return model, tok, tok.convert_tokens_to_ids("<|im_end|>")


def answered(out: Path) -> set:
    """The requests an earlier run already wrote to `out`."""
    if not out.exists():
        return set()
    return {json.loads(line)["prompt"] for line in out.read_text(encoding="utf-8").splitlines() if line.strip()}


def write_answers(model, tok, end: int, prompts: list[str], max_new_tokens: int, out: Path,
                  temperature: float = 0.0, seed: int = 0) -> int:
    """SmolLM2's answers (greedy; sampled when temperature > 0, seeded) to one batch of requests, appended to `out` as
    {"prompt", "answer"}; returns the answer tokens."""
    enc = tok.apply_chat_template([[{"role": "user", "content": p}] for p in prompts], add_generation_prompt=True,
                                  return_tensors="pt", padding=True, return_dict=True)
    sampling = {"do_sample": False}
    if temperature > 0:
        torch.manual_seed(seed)
        sampling = {"do_sample": True, "temperature": temperature, "top_p": 1.0, "top_k": 0}
    with torch.no_grad():
        ans = model.generate(**enc, **sampling, max_new_tokens=max_new_tokens, eos_token_id=end,
                             pad_token_id=tok.pad_token_id)
    tokens = 0
    with out.open("a", encoding="utf-8") as f:
        for p, row in zip(prompts, ans[:, enc["input_ids"].shape[1]:].tolist()):
            row = row[: row.index(end)] if end in row else row
            tokens += len(row)
            f.write(json.dumps({"prompt": p, "answer": tok.decode(row, skip_special_tokens=True)}) + "\n")
    return tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", required=True)
    pools = ["head", "head_extra", "head_wave4", "head_wave5", "head_wave6", "head_rephrase", "head_wave7",
             "distill"]
    parser.add_argument("--pool", choices=pools, default="head",
                        help="head: prompt_sets.head_training_prompts(); head_extra: head_extra_prompts() (the third "
                             "wave of items, stage 7); head_wave4 / head_wave5: head_wave4_prompts() / "
                             "head_wave5_prompts() (the fourth and fifth, stage 8); head_wave6 / head_rephrase: "
                             "head_wave6_prompts() / head_rephrase_prompts() (stage 10); "
                             "distill: training_chat_prompts()")
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--max_new_tokens", type=int, default=160, help="longest answer")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--temperature", type=float, default=0.0, help="0: greedy; > 0: a sampled pass")
    parser.add_argument("--seed", type=int, default=0, help="sampled passes: batch i is seeded with seed + i")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                        help="bfloat16: the answers from SmolLM2 in bf16, ~3x the tokens a minute on a CPU with AMX "
                             "(Intel Sapphire Rapids and later; elsewhere bf16 is emulated and slower). A training "
                             "context only: train-draft labels every position with the fp32 target's own distribution")
    args = parser.parse_args()
    if args.temperature < 0:
        parser.error(f"--temperature must be >= 0 (0 is greedy), got {args.temperature}")
    torch.set_num_threads(args.threads)
    from optimum_uag.models.prompt_sets import (head_extra_prompts, head_training_prompts, head_wave4_prompts,
                                                head_rephrase_prompts, head_wave5_prompts, head_wave6_prompts,
                                                head_wave7_prompts,
                                                training_chat_prompts)
    from optimum_uag.runners.packed import packed_weights

    bf16 = args.dtype == "bfloat16"
    if bf16 and not torch.backends.mkldnn.is_available():
        parser.error("--dtype bfloat16 needs torch's oneDNN (mkldnn) backend")
    model, tok, end = load_smollm2(torch.bfloat16 if bf16 else torch.float32)
    out = Path(args.output)
    done = answered(out)
    pool = {"head": head_training_prompts, "head_extra": head_extra_prompts, "head_wave4": head_wave4_prompts,
            "head_wave5": head_wave5_prompts, "head_wave6": head_wave6_prompts,
            "head_rephrase": head_rephrase_prompts, "head_wave7": head_wave7_prompts, "distill": training_chat_prompts}[args.pool]()
    todo = sorted((p for p in pool if p not in done), key=lambda p: len(tok(p)["input_ids"]))
    print(f"[answers] {len(done)} answered before, {len(todo)} to answer", flush=True)
    t0, kept, answer_tokens = time.time(), 0, 0
    with packed_weights(model, enabled=not bf16) or contextlib.nullcontext():  # packing is fp32
        for start in range(0, len(todo), args.batch):
            if time.time() - t0 > args.minutes * 60:
                break
            prompts = todo[start : start + args.batch]
            answer_tokens += write_answers(model, tok, end, prompts, args.max_new_tokens, out, args.temperature,
                                           args.seed + start // args.batch)
            kept += len(prompts)
            print(f"[answers] {kept}/{len(todo)}, {answer_tokens} answer tokens, {(time.time() - t0) / 60:.1f} min",
                  flush=True)
    print(json.dumps({"answered": kept, "answer_tokens": answer_tokens, "minutes": round((time.time() - t0) / 60, 1),
                      "batch": args.batch, "max_new_tokens": args.max_new_tokens, "dtype": args.dtype,
                      "temperature": args.temperature}), flush=True)


if __name__ == "__main__":
    main()
