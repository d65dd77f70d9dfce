#!/usr/bin/env python
"""Training text for SmolLM2's feature head (recipe: docs/models.md), as train-draft datasets.

  answers.jsonl  SmolLM2's own answers to the training chat requests (examples/distill_smollm2.py --stage gen:
                 greedy pass, then sampled T=0.7): {"prompt", "answer"}
  text.jsonl     256-token chunks of the standard library's Python and the installed packages' Markdown
                 descriptions (the distillation recipe's `score` text): {"text"}

    python examples/distill_smollm2.py --stage gen --gen_minutes 18 --gen_batch 32 --work_dir W
    python examples/smollm2_head_data.py --work_dir W --text_chunks 240
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work_dir", required=True)
    parser.add_argument("--text_chunks", type=int, default=240)
    args = parser.parse_args()
    from transformers import AutoTokenizer

    from distill_smollm2 import text_chunks
    from optimum_uag.models import smollm2
    from optimum_uag.models.prompt_sets import heldout_chat_prompts

    work = Path(args.work_dir)
    tok = AutoTokenizer.from_pretrained(smollm2())
    held = set(heldout_chat_prompts())
    records = torch.load(work / "gen.pt", weights_only=False)
    with open(work / "answers.jsonl", "w", encoding="utf-8") as f:
        for rec in records:
            assert rec["prompt"] not in held, "a held-out prompt in the training data"
            answer = tok.decode(rec["answer_ids"], skip_special_tokens=True)
            f.write(json.dumps({"prompt": rec["prompt"], "answer": answer}) + "\n")
    chunks = text_chunks(tok, 256)[: args.text_chunks]
    with open(work / "text.jsonl", "w", encoding="utf-8") as f:
        for ids in chunks:
            f.write(json.dumps({"text": tok.decode(ids)}) + "\n")
    print(f"{len(records)} answers, {len(chunks)} text chunks in {work}")


if __name__ == "__main__":
    main()
