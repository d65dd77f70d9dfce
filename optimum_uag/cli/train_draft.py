"""`optimum-uag train-draft`: train a feature-level draft head for a target on text (or on the target's own answers).

    optimum-uag train-draft --model_name_or_path T --dataset_name data.jsonl --output_dir D --max_minutes 60

Records: {"messages": [...]} (a conversation, through the target's chat template), {"prompt": "..."} with
--generate_answers (the target answers it first: self-distillation), or text in --column_name (chunked).
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import json
import random
import sys
import time
from pathlib import Path

import torch


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="optimum-uag train-draft", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model_name_or_path", required=True, help="the target ('smollm2', a directory or a Hub id)")
    p.add_argument("--dataset_name", action="append", required=True,
                   help="JSON/JSONL/text file, saved dataset or Hub dataset (repeatable)")
    p.add_argument("--column_name", default="text", help="text column of plain-text records")
    p.add_argument("--dataset_max_samples", type=int, default=None)
    p.add_argument("--output_dir", required=True, help="where the head (config.json + model.safetensors) goes")
    p.add_argument("--work_dir", default=None,
                   help="feature cache (default: OUTPUT_DIR/features); resumable, and a run with more datasets "
                        "extracts only their new sequences (training reads this run's sequences only)")
    p.add_argument("--generate_answers", action="store_true",
                   help="records with a 'prompt' (or a conversation ending with a user turn) are answered by the "
                        "target first (greedy), and the head trains on its own answers")
    p.add_argument("--max_new_tokens", type=int, default=160, help="answer length with --generate_answers")
    p.add_argument("--seq_len", type=int, default=256, help="tokens per chunk of text")
    p.add_argument("--max_minutes", type=float, default=60.0, help="budget for features + training")
    p.add_argument("--feature_share", type=float, default=0.3, help="share of --max_minutes for features")
    p.add_argument("--draft_vocab_size", type=int, default=8192, help="0: the target's full vocabulary")
    p.add_argument("--unroll_steps", type=int, default=3)
    p.add_argument("--window", type=int, default=384, help="longest training span (pairs); shorter sequences whole")
    p.add_argument("--batch_size", type=int, default=8, help="sequences per step")
    p.add_argument("--init_head", default=None,
                   help="start from this head directory (same target, same draft vocabulary) instead of a new head")
    p.add_argument("--eval_dataset", default=None,
                   help="held-out records (as --dataset_name; prompts only with --generate_answers) to report the "
                        "head's agreement on, instead of a 5%% split of the training prompts")
    p.add_argument("--train_lm_head", action="store_true",
                   help="train the draft LM head's rows (default: the target's rows, frozen, as EAGLE-1/2)")
    p.add_argument("--feature_layers", default="none",
                   help="fused target features (EAGLE-3): 'eagle3' (the inputs of layers 2, L/2 and L-3, then the final "
                        "norm's output), a comma list of hidden_states indices, or 'none' (the final norm's output "
                        "alone); with --init_head, a head without them starts fused as the same function")
    p.add_argument("--learning_rate", type=float, default=1e-3)
    p.add_argument("--feature_dtype", choices=["float32", "bfloat16"], default="float32",
                   help="precision of the target's forward that writes the training features and teacher "
                        "distributions: bfloat16 is ~3-4x faster on a CPU with AMX (Intel Sapphire Rapids and later) "
                        "or on a GPU/HPU, its features differ from float32's by ~2%% RMS (below the training noise); "
                        "the held-out set (--eval_dataset) is always extracted in float32, the precision drafting reads")
    p.add_argument("--bf16", action="store_true",
                   help="mixed-precision training (autocast to bfloat16, float32 master weights and optimizer), as "
                        "transformers' TrainingArguments(bf16=True): faster where bfloat16 matmuls are native")
    p.add_argument("--device", default="auto", help="auto (hpu > cuda > cpu), cpu, cuda, hpu")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (torch.set_num_threads)")
    p.add_argument("--seed", type=int, default=0)
    return p


def pick_device(name: str) -> torch.device:
    if name != "auto":
        return torch.device(name)
    from ..gaudi import device as hpu

    if hpu.available() and getattr(torch, "hpu", None) is not None and torch.hpu.is_available():
        return torch.device("hpu")
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def read_records(names: list[str], max_samples: int | None) -> list[dict]:
    records = []
    for name in names:
        path = Path(name)
        if path.is_file() and path.suffix in (".jsonl", ".json"):
            text = path.read_text(encoding="utf-8")
            rows = json.loads(text) if path.suffix == ".json" else [json.loads(line) for line in text.splitlines()
                                                                     if line.strip()]
        elif path.is_file():
            rows = [{"text": path.read_text(encoding="utf-8")}]
        else:
            import datasets

            try:
                data = datasets.load_from_disk(name) if path.is_dir() else datasets.load_dataset(name, split="train")
            except Exception as exc:  # noqa: BLE001 - one clear line, whatever datasets raised
                raise SystemExit(f"train-draft: cannot read dataset {name!r}: {str(exc).splitlines()[0][:160]}")
            rows = list(data)
        records.extend(rows[:max_samples] if max_samples else rows)
    if not records:
        raise SystemExit("train-draft: the datasets hold no records")
    return records


def answer_prompts(model, tok, convs: list[list[dict]], max_new_tokens: int, log) -> list[list[dict]]:
    """The target's own greedy answers to the conversations' last user turns (batched, shortest first; on a CPU on
    the prepacked weights optimum-uag's runners use where they are faster: runners/packed.py)."""
    from ..runners.packed import packed_weights

    tok.padding_side = "left"
    pack = (packed_weights(model) if model.device.type == "cpu" else None) or contextlib.nullcontext()
    order = sorted(range(len(convs)), key=lambda i: len(str(convs[i])))
    out = [None] * len(convs)
    t0 = time.time()
    for b in range(0, len(order), 16):
        idx = order[b : b + 16]
        enc = tok.apply_chat_template([convs[i] for i in idx], add_generation_prompt=True, return_tensors="pt",
                                      padding=True, return_dict=True).to(model.device)
        with torch.no_grad(), pack:
            gen = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tok.pad_token_id)
        for r, i in enumerate(idx):
            answer = tok.decode(gen[r, enc["input_ids"].shape[1]:], skip_special_tokens=True)
            out[i] = convs[i] + [{"role": "assistant", "content": answer}]
        log(f"[answers] {b + len(idx)}/{len(convs)} ({(time.time() - t0) / 60:.1f} min)")
    return out


def chat_ids(tok, conv: list[dict], add_generation_prompt: bool = False) -> list[int]:
    """The conversation through the tokenizer's chat template, as a list of ids on every transformers line (5.x's
    apply_chat_template(tokenize=True) returns a BatchEncoding: the text is rendered, then encoded)."""
    text = tok.apply_chat_template(conv, tokenize=False, add_generation_prompt=add_generation_prompt)
    return list(tok(text, add_special_tokens=False)["input_ids"])


def conversation_sequence(tok, conv: list[dict], max_len: int) -> dict | None:
    """{'ids', 'loss_mask' (the assistant turns' tokens), 'group' (the first user turn)}, or None when the
    conversation has no assistant turn to learn from."""
    ids = chat_ids(tok, conv)
    mask = [False] * len(ids)
    for i, turn in enumerate(conv):
        if turn.get("role") != "assistant":
            continue
        begin = len(chat_ids(tok, conv[:i], add_generation_prompt=True))
        end = len(chat_ids(tok, conv[: i + 1]))
        for j in range(begin, min(end, len(ids))):
            mask[j] = True
    if not any(mask):
        return None
    first = next((t.get("content", "") for t in conv if t.get("role") == "user"), "")
    return {"ids": ids[:max_len], "loss_mask": mask[:max_len], "group": str(first)}


def token_sequences(records: list[dict], tok, column: str, seq_len: int, model=None, generate: bool = False,
                    max_new_tokens: int = 160, log=print) -> list[dict]:
    """Training sequences: conversations through the chat template (whole; the loss on the assistant's turns),
    text in seq_len chunks (every token)."""
    convs, texts = [], []
    for rec in records:
        if "messages" in rec:
            convs.append(list(rec["messages"]))
        elif "prompt" in rec and (generate or "answer" in rec):
            conv = [{"role": "user", "content": rec["prompt"]}]
            convs.append(conv + ([{"role": "assistant", "content": rec["answer"]}] if "answer" in rec else []))
        elif column in rec:
            texts.append(rec[column])
        else:
            raise SystemExit(f"train-draft: a record has neither 'messages', 'prompt' nor '{column}': {list(rec)[:5]}")
    if generate:
        todo = [i for i, c in enumerate(convs) if c[-1]["role"] == "user"]
        done = answer_prompts(model, tok, [convs[i] for i in todo], max_new_tokens, log)
        for i, conv in zip(todo, done):
            convs[i] = conv
    seqs = [seq for seq in (conversation_sequence(tok, c, seq_len * 4) for c in convs) if seq is not None]
    for text in texts:
        ids = list(tok(text)["input_ids"])
        for i in range(0, max(1, len(ids) - seq_len // 4), seq_len):
            chunk = ids[i : i + seq_len]
            seqs.append({"ids": chunk, "loss_mask": [True] * len(chunk), "group": f"text:{text[:64]}"})
    return [s for s in seqs if len(s["ids"]) >= 16]


def parse_feature_layers(value: str, num_layers: int) -> list[int]:
    """'none' -> [], 'eagle3' -> EAGLE-3's low / middle / high layers, '2,15,27' -> [2, 15, 27] (checked)."""
    from ..training.feature import eagle3_layers

    value = (value or "none").strip().lower()
    if value == "none":
        return []
    if value == "eagle3":
        return eagle3_layers(num_layers)
    try:
        layers = sorted({int(x) for x in value.split(",") if x.strip()})
    except ValueError:
        raise SystemExit(f"train-draft: --feature_layers takes 'none', 'eagle3' or hidden_states indices like "
                         f"'2,15,27', got {value!r}")
    if not layers or layers[0] < 0 or layers[-1] >= num_layers:
        raise SystemExit(f"train-draft: --feature_layers {value!r}: indices must lie in 0..{num_layers - 1} (the "
                         f"target has {num_layers} layers; the final norm's output is always included)")
    return layers


def train_draft_main(argv=None) -> int:
    from ..training.feature import extract_features, train_feature_head
    from .loading import load, resolve_model_name

    args = build_parser().parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = pick_device(args.device)
    t0 = time.time()
    name = args.model_name_or_path
    model, tok, path = load(resolve_model_name(name), "target", device, torch.float32, args)
    text_cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    layers = parse_feature_layers(args.feature_layers, int(text_cfg.num_hidden_layers))
    if not layers and args.init_head:  # a fused head continues with its own layers
        init = Path(args.init_head) / "config.json"
        layers = [int(i) for i in (json.loads(init.read_text()).get("feature_layers") or [])] if init.is_file() else []
    records = read_records(args.dataset_name, args.dataset_max_samples)
    seqs = token_sequences(records, tok, args.column_name, args.seq_len, model, args.generate_answers,
                           args.max_new_tokens)
    random.Random(args.seed).shuffle(seqs)
    work = Path(args.work_dir or Path(args.output_dir) / "features")
    budget = args.max_minutes
    trained = sum(sum(s["loss_mask"]) for s in seqs)
    print(f"train-draft: {len(seqs)} sequences, {sum(len(s['ids']) for s in seqs)} tokens ({trained} trained on); "
          f"features in {work}", flush=True)
    feature_model = model
    if args.feature_dtype != "float32":
        feature_model = copy.deepcopy(model).to(getattr(torch, args.feature_dtype))
    info = extract_features(feature_model, seqs, work, max_minutes=budget * args.feature_share, feature_layers=layers,
                            log=lambda m: print(m, flush=True))
    del feature_model
    eval_dir = None
    if args.eval_dataset:  # held out by construction: features of their own, never trained on
        eval_seqs = token_sequences(read_records([args.eval_dataset], None), tok, args.column_name, args.seq_len, model,
                                    args.generate_answers, args.max_new_tokens)
        eval_dir = work / "eval"
        extract_features(model, eval_seqs, eval_dir, feature_layers=info["feature_layers"],
                         log=lambda m: print(m, flush=True))
    left = max(1.0, budget - (time.time() - t0) / 60)
    eos = tok.eos_token_id
    result = train_feature_head(model, work, args.output_dir, target_name=name,
                                draft_vocab_size=args.draft_vocab_size or None, minutes=left,
                                steps=args.unroll_steps, window=args.window, batch_size=args.batch_size,
                                lr=args.learning_rate, seed=args.seed, eos_token_ids=[eos] if eos is not None else [],
                                freeze_lm_head=not args.train_lm_head, start_from=args.init_head,
                                eval_dir=eval_dir, feature_layers=layers, sequences=seqs, bf16=args.bf16,
                                log=lambda m: print(m, flush=True))
    result["features"] = info
    result["command"] = "optimum-uag train-draft " + " ".join(argv if argv is not None else sys.argv[1:])
    Path(args.output_dir, "training_log.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"train-draft: head saved to {args.output_dir} ({(time.time() - t0) / 60:.1f} min)")
    return 0
