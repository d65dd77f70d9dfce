"""`optimum-uag build-datastore`: a datastore of the target's own answers beside a feature head (drafters/datastore.py).

    optimum-uag build-datastore --model_name_or_path T --dataset_name answers.jsonl --head D

The head directory D then carries `datastore.npy`: the tree's lookup branch also retrieves the continuation of a row's
last tokens from it (where the row's own prompt and output have no longer n-gram match). Records as train-draft's:
{"prompt", "answer"} (the target's answers, e.g. examples/answer_smollm2.py), {"messages": [...]} (the assistant turns
are kept), or {"prompt"} with --generate_answers (the target answers greedily first). Only the answers are stored,
as the target's chat template tokenizes them. `train-draft --datastore` writes one with the head it trains.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def answer_spans(seqs: list[dict]) -> list[list[int]]:
    """The runs of loss-masked (answer) tokens of train-draft's sequences, one document each."""
    docs = []
    for seq in seqs:
        run = []
        for token, answer in zip(seq["ids"], seq["loss_mask"]):
            if answer:
                run.append(int(token))
            elif run:
                docs.append(run)
                run = []
        if run:
            docs.append(run)
    return [d for d in docs if len(d) >= 2]


def _answers(records: list[dict]) -> list[str]:
    out = []
    for rec in records:
        if "messages" in rec:
            out += [t.get("content", "") for t in rec["messages"] if t.get("role") == "assistant"]
        elif "answer" in rec:
            out.append(rec["answer"])
    return [t for t in out if t]


def build_datastore_main(argv=None) -> int:
    import torch

    from ..engine.drafters.datastore import DATASTORE_FILE, Datastore
    from .loading import load, resolve_model_name
    from .train_draft import read_records, token_sequences

    p = argparse.ArgumentParser(prog="optimum-uag build-datastore", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model_name_or_path", required=True, help="the target ('smollm2', a directory or a Hub id)")
    p.add_argument("--dataset_name", action="append", required=True, help="answer files (.jsonl / .json), repeatable")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--head", help="a feature-head directory: writes its datastore.npy")
    where.add_argument("--output", help="a .npy file to write instead")
    p.add_argument("--generate_answers", action="store_true", help="{'prompt'} records: the target answers first")
    p.add_argument("--max_new_tokens", type=int, default=160)
    p.add_argument("--column_name", default="text")
    args = p.parse_args(argv)
    if args.head and not (Path(args.head) / "config.json").is_file():
        raise SystemExit(f"build-datastore: --head {args.head!r} is not a feature-head directory (no config.json); "
                         "train one with optimum-uag train-draft, or pass --output FILE.npy")
    name = args.model_name_or_path
    model, tok, _ = load(resolve_model_name(name), "target", torch.device("cpu"), torch.float32, args)
    records = read_records(args.dataset_name, None)
    if getattr(tok, "chat_template", None):
        docs = answer_spans(token_sequences(records, tok, args.column_name, 10**6, model, args.generate_answers,
                                            args.max_new_tokens))
    elif args.generate_answers:
        raise SystemExit("build-datastore: --generate_answers needs the target's chat template, and its tokenizer has "
                         "none; pass records with the answers ({'prompt', 'answer'})")
    else:  # no chat template: the answers as plain text
        docs = [tok(text, add_special_tokens=False)["input_ids"] for text in _answers(records)]
        docs = [list(map(int, d)) for d in docs if len(d) >= 2]
    if not docs:
        raise SystemExit("build-datastore: the records hold no answers (pass {'prompt', 'answer'} or {'messages'} "
                         "records, or {'prompt'} ones with --generate_answers)")
    store = Datastore(docs)
    out = Path(args.head) / DATASTORE_FILE if args.head else Path(args.output)
    store.save(out)
    print(f"build-datastore: {len(docs)} answers, {sum(map(len, docs))} tokens -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(build_datastore_main())
