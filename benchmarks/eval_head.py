#!/usr/bin/env python
"""Feature heads measured side by side on one held-out features folder (train-draft's --eval_dataset features,
WORK_DIR/eval): first-token agreement per drafting step at the answer tokens, simulated chain tau and top-4 tree tau
(training/feature.py: evaluate_head), as train-draft reports them; one JSON line per head. Then each later head against
the first, paired at the same positions (first drafting step): the positions only one of the two gets right, and
McNemar's z on them (|z| < 2: the difference is inside the noise of this held-out set).

    python benchmarks/eval_head.py W/s14/features/eval optimum_uag/models/smollm2_head W/s14/head
"""
from __future__ import annotations

import argparse
import json
import math

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("eval_dir", help="a features folder (float32 features of held-out sequences)")
    parser.add_argument("heads", nargs="+", help="head directories")
    parser.add_argument("--model_name_or_path", default="smollm2")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from optimum_uag.cli.loading import resolve_model_name
    from optimum_uag.engine.drafters.feature_head import load_feature_head
    from optimum_uag.training.feature import evaluate_head, load_shards
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(resolve_model_name(args.model_name_or_path),
                                                 dtype=torch.float32).eval()
    embed = model.get_input_embeddings()
    vocab = int(model.get_output_embeddings().weight.shape[0])
    records = [r for r in load_shards(args.eval_dir) if len(r["ids"]) >= 6]
    right = []
    for path in args.heads:
        head = load_feature_head(path, dtype=torch.float32).eval()
        ids, t2d = head.draft_ids(), None
        if ids is not None:
            t2d = torch.full((vocab,), -1, dtype=torch.long)
            t2d[ids] = torch.arange(len(ids))
        first = []
        with torch.no_grad():
            report = evaluate_head(head, embed, t2d, records, 384, 3, width=head.feature_size, first_step=first)
        print(path, json.dumps(report), flush=True)
        right.append(torch.cat(first))
    for path, ok in zip(args.heads[1:], right[1:]):
        only_first, only_this = int((right[0] & ~ok).sum()), int((ok & ~right[0]).sum())
        z = (only_this - only_first) / math.sqrt(max(only_this + only_first, 1))
        print(f"{path} vs {args.heads[0]}", json.dumps({"positions": len(ok), "both_right": int((ok & right[0]).sum()),
              "only_first_right": only_first, "only_this_right": only_this, "mcnemar_z": round(z, 2)}), flush=True)



if __name__ == "__main__":
    main()
