#!/usr/bin/env python
"""Reproduce the embedded model family of optimum-uag on CPU, deterministically.

Corpus: the Python standard library of the running interpreter (offline, on every machine); 5% of the
files (chosen by a hash of their relative path) are held out for evaluation.

Stages (run in order, each writes into --work_dir and appends to --work_dir/log.json):
  tokenizers  byte-level BPE for the target (GPT-2 style, 8192), Llama-style SentencePiece BPE with
              byte fallback for the assistant (Metaspace '▁', <0xNN> tokens, 6144)
  target      Llama (hidden 512, 8 layers), next-token loss (bf16 autocast where the CPU has native bf16)
  same        small Llama with the target tokenizer, logit-distilled from the target (KL to the target)
  gen         sequence-level distillation data: the target continues training prompts (sampled, T=0.8)
  assistant   small GPT-NeoX with the assistant tokenizer trained on target-generated text + corpus
  export      bf16 safetensors (sharded < 25 MB) + tokenizers into optimum_uag/models/
  eval        held-out losses

Example (the exact commands and numbers are recorded in docs/models.md):
  python examples/train_embedded_models.py --stage all --target_minutes 50
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import sysconfig
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

SEQ_LEN = 128
TARGET_VOCAB = 8192
ASSISTANT_VOCAB = 6144
SPECIALS_TARGET = ["<|endoftext|>"]
SPECIALS_ASSISTANT = ["<unk>", "<s>", "</s>"]


def has_native_bf16() -> bool:
    """bf16 autocast is ~10x faster than fp32 only on CPUs with avx512_bf16/AMX; elsewhere it is emulated (slow)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


AUTOCAST = {"enabled": False}


def autocast():
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=AUTOCAST["enabled"])


def log(work: Path, stage: str, **values) -> None:
    path = work / "log.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    data.setdefault(stage, {}).update(values)
    path.write_text(json.dumps(data, indent=2))
    print(f"[{stage}]", json.dumps(values), flush=True)


# ----------------------------------------------------------------------------------------------- corpus
def corpus_files() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(train, heldout) lists of (relative path, text) from the interpreter's standard library."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.rglob("*.py") if "site-packages" not in p.parts)
    train, heldout = [], []
    for path in files:
        rel = path.relative_to(root).as_posix()
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if not text.strip():
            continue
        bucket = int(hashlib.sha256(rel.encode()).hexdigest(), 16) % 100
        (heldout if bucket < 5 else train).append((rel, text))
    return train, heldout


# ------------------------------------------------------------------------------------------- tokenizers
def llama_style_bpe(lines, vocab_size: int, limit_alphabet: int = 200, byte_fallback: bool = True):
    """A Llama-like tokenizer: ids 0-2 <unk> <s> </s>, then the 256 <0xNN> byte tokens (ordinary, non-special
    vocabulary entries, so decode() keeps them), then BPE pieces; '▁' space marker prepended; BOS added."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<unk>", "<s>", "</s>"]
    n_bytes = 256 if byte_fallback else 0
    normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    draft = Tokenizer(models.BPE(unk_token="<unk>"))
    draft.normalizer = normalizer
    draft.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=vocab_size - n_bytes, special_tokens=specials,
                                                         limit_alphabet=limit_alphabet, show_progress=False))
    spec = json.loads(draft.to_str())["model"]
    vocab = {tok: i for i, tok in enumerate(specials)}
    vocab.update({f"<0x{i:02X}>": len(specials) + i for i in range(n_bytes)})
    for tok, _ in sorted(spec["vocab"].items(), key=lambda kv: kv[1]):
        if tok not in vocab:
            vocab[tok] = len(vocab)
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in spec["merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, byte_fallback=byte_fallback, unk_token="<unk>", fuse_unk=True))
    tok.normalizer = normalizer
    tok.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", vocab["<s>"])])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   pad_token="<unk>", model_max_length=2048, clean_up_tokenization_spaces=False)
    fast.padding_side = "left"
    return fast


def build_target_tokenizer(work: Path, texts) -> None:
    """GPT-2 style byte-level BPE ('Ġ' space marker, no UNK)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=TARGET_VOCAB, special_tokens=SPECIALS_TARGET, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>", unk_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        model_max_length=2048, clean_up_tokenization_spaces=False,
    )
    fast.save_pretrained(work / "tok_target")


def build_tokenizers(work: Path, train, which: str = "both") -> None:
    texts = [t for _, t in train]

    if which in ("both", "target"):
        build_target_tokenizer(work, texts)
    if which in ("both", "assistant"):
        # Assistant: Llama/SentencePiece style (prepend '▁', spaces -> '▁', byte fallback <0xNN>), BOS added.
        # SentencePiece trains on lines; newlines are left to byte fallback (<0x0A>) as in Llama.
        lines = [line for text in texts for line in text.split("\n") if line.strip()]
        llama_style_bpe(lines, ASSISTANT_VOCAB).save_pretrained(work / "tok_assistant")
    log(work, "tokenizers", target_vocab=TARGET_VOCAB, assistant_vocab=ASSISTANT_VOCAB)


def load_tok(path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def encode_corpus(tok, docs, add_special: bool) -> np.ndarray:
    """Concatenate documents, separated by EOS, into one id stream."""
    ids = []
    enc = tok(list(docs), add_special_tokens=add_special)["input_ids"]
    for row in enc:
        ids.extend(row)
        ids.append(tok.eos_token_id)
    return np.asarray(ids, dtype=np.int32)


class Batches:
    """Deterministic random windows of SEQ_LEN + 1 tokens."""

    def __init__(self, stream: np.ndarray, batch: int, seed: int):
        self.stream, self.batch = torch.from_numpy(stream.astype(np.int64)), batch
        self.gen = torch.Generator().manual_seed(seed)

    def __next__(self):
        starts = torch.randint(0, len(self.stream) - SEQ_LEN - 1, (self.batch,), generator=self.gen)
        return torch.stack([self.stream[s : s + SEQ_LEN + 1] for s in starts.tolist()])


@torch.no_grad()
def heldout_loss(model, stream: np.ndarray, max_windows: int = 256) -> float:
    model.eval()
    data = torch.from_numpy(stream.astype(np.int64))
    n = min(max_windows, (len(data) - 1) // SEQ_LEN)
    total, count = 0.0, 0
    for i in range(0, n, 32):
        rows = torch.stack([data[j * SEQ_LEN : j * SEQ_LEN + SEQ_LEN + 1] for j in range(i, min(n, i + 32))])
        with autocast():
            logits = model(rows[:, :-1]).logits.float()
        total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), rows[:, 1:].reshape(-1), reduction="sum").item()
        count += rows[:, 1:].numel()
    model.train()
    return total / count


def lr_at(step: int, warmup: int, total: int, peak: float) -> float:
    if step < warmup:
        return peak * (step + 1) / warmup
    frac = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))


def train_loop(work, name, model, batches, minutes, peak_lr, est_step_s, loss_fn, heldout=None):
    """Time-budgeted training: the cosine schedule is sized from a measured step time."""
    opt = torch.optim.AdamW(model.parameters(), lr=peak_lr, betas=(0.9, 0.95), weight_decay=0.1)
    model.train()
    # Measure a few steps to size the schedule to the time budget.
    t0 = time.time()
    step, total_steps, tokens = 0, None, 0
    losses = []
    while True:
        if total_steps is None and step == 10:
            per = (time.time() - t0) / 10
            total_steps = max(20, int(minutes * 60 / per))
            print(f"[{name}] {per:.3f}s/step -> {total_steps} steps", flush=True)
        if total_steps is not None and step >= total_steps:
            break
        lr = lr_at(step, 50, total_steps or int(minutes * 60 / est_step_s), peak_lr)
        for group in opt.param_groups:
            group["lr"] = lr
        batch = next(batches)
        with autocast():
            loss = loss_fn(model, batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        tokens += batch[:, 1:].numel()
        losses.append(loss.item())
        step += 1
        if step % 100 == 0:
            msg = f"[{name}] step {step}/{total_steps} loss {np.mean(losses[-100:]):.3f} lr {lr:.2e} {time.time()-t0:.0f}s"
            if heldout is not None and step % 500 == 0:
                msg += f" heldout {heldout_loss(model, heldout, 16):.3f}"
            print(msg, flush=True)
    return {"steps": step, "tokens_seen": tokens, "train_minutes": round((time.time() - t0) / 60, 1),
            "final_train_loss": round(float(np.mean(losses[-100:])), 4)}


def lm_loss(model, batch):
    logits = model(batch[:, :-1]).logits
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))


# ---------------------------------------------------------------------------------------------- models
def target_config(tok):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=len(tok), hidden_size=512, intermediate_size=1024, num_hidden_layers=8, num_attention_heads=8,
        num_key_value_heads=8, max_position_embeddings=2048, rope_theta=10000.0, tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id,
        torch_dtype="bfloat16",
    )


def same_config(tok):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=len(tok), hidden_size=128, intermediate_size=384, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=4, max_position_embeddings=2048, tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id,
        torch_dtype="bfloat16",
    )


def assistant_config(tok):
    from transformers import GPTNeoXConfig

    return GPTNeoXConfig(
        vocab_size=len(tok), hidden_size=128, intermediate_size=512, num_hidden_layers=4, num_attention_heads=4,
        max_position_embeddings=2048, rotary_pct=0.5, tie_word_embeddings=True, use_parallel_residual=True,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.unk_token_id,
        torch_dtype="bfloat16",
    )


def seed_all(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def stage_target(work, train, heldout, minutes):
    from transformers import LlamaForCausalLM

    tok = load_tok(work / "tok_target")
    stream = encode_corpus(tok, (t for _, t in train), False)
    held = encode_corpus(tok, (t for _, t in heldout), False)
    np.save(work / "train_target.npy", stream)
    np.save(work / "heldout_target.npy", held)
    seed_all(1234)
    model = LlamaForCausalLM(target_config(tok))
    n = sum(p.numel() for p in model.parameters())
    info = train_loop(work, "target", model, Batches(stream, 8, 1), minutes, 1.5e-3, 2.5, lm_loss, held)
    info.update(params=n, corpus_tokens=int(len(stream)), heldout_tokens=int(len(held)),
                heldout_loss=round(heldout_loss(model, held), 4), seed=1234)
    model.save_pretrained(work / "target")
    tok.save_pretrained(work / "target")
    log(work, "target", **info)


def stage_same(work, minutes):
    from transformers import LlamaForCausalLM

    tok = load_tok(work / "tok_target")
    target = LlamaForCausalLM.from_pretrained(work / "target", torch_dtype=torch.float32).eval()
    for p in target.parameters():
        p.requires_grad_(False)
    stream, held = np.load(work / "train_target.npy"), np.load(work / "heldout_target.npy")
    seed_all(2345)
    model = LlamaForCausalLM(same_config(tok))
    # Start from the target's embeddings projected down would tie the draft to the target's space; we keep
    # it simple: random init, distillation does the rest.

    def kd_loss(m, batch):
        inp = batch[:, :-1]
        with torch.no_grad():
            t_logits = target(inp).logits.float()
        s_logits = m(inp).logits.float()
        kl = F.kl_div(F.log_softmax(s_logits, -1), F.log_softmax(t_logits, -1), log_target=True,
                      reduction="batchmean") / inp.shape[1]
        ce = F.cross_entropy(s_logits.reshape(-1, s_logits.shape[-1]), batch[:, 1:].reshape(-1))
        return 0.9 * kl + 0.1 * ce

    n = sum(p.numel() for p in model.parameters())
    info = train_loop(work, "same", model, Batches(stream, 16, 2), minutes, 3e-3, 1.0, kd_loss, held)
    info.update(params=n, heldout_loss=round(heldout_loss(model, held), 4), seed=2345, method="logit distillation (0.9 KL + 0.1 CE)")
    model.save_pretrained(work / "same")
    tok.save_pretrained(work / "same")
    log(work, "assistant_same_tokenizer", **info)


@torch.no_grad()
def stage_gen(work, minutes):
    """Sequence-level distillation data: the target continues random 32-token training prompts."""
    from transformers import LlamaForCausalLM

    tok = load_tok(work / "tok_target")
    target = LlamaForCausalLM.from_pretrained(work / "target", torch_dtype=torch.float32).eval()
    stream = torch.from_numpy(np.load(work / "train_target.npy").astype(np.int64))
    gen = torch.Generator().manual_seed(3456)
    torch.manual_seed(3456)
    texts, t0, new_tokens = [], time.time(), 0
    while time.time() - t0 < minutes * 60:
        starts = torch.randint(0, len(stream) - 64, (64,), generator=gen).tolist()
        prompts = torch.stack([stream[s : s + 32] for s in starts])
        out = target.generate(prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=160, do_sample=True,
                              temperature=0.7, top_k=0, top_p=1.0, pad_token_id=tok.eos_token_id,
                              eos_token_id=None)
        new_tokens += out[:, 32:].numel()
        texts.extend(tok.batch_decode(out, skip_special_tokens=True))
        print(f"[gen] {len(texts)} sequences, {new_tokens} new tokens, {time.time()-t0:.0f}s", flush=True)
    (work / "generated.json").write_text(json.dumps(texts))
    log(work, "generated", sequences=len(texts), target_tokens=new_tokens, minutes=round((time.time() - t0) / 60, 1),
        sampling="temperature 0.7, prompts: 32 training tokens, 160 new tokens", seed=3456)


def stage_assistant(work, train, heldout, minutes):
    from transformers import GPTNeoXForCausalLM

    tok = load_tok(work / "tok_assistant")
    generated = json.loads((work / "generated.json").read_text())
    # Mix: target-generated text (what the draft must predict) twice, plus the corpus once.
    gen_stream = encode_corpus(tok, generated, True)
    corpus_stream = encode_corpus(tok, (t for _, t in train), True)
    stream = np.concatenate([gen_stream, gen_stream, corpus_stream])
    held = encode_corpus(tok, (t for _, t in heldout), True)
    seed_all(4567)
    model = GPTNeoXForCausalLM(assistant_config(tok))
    n = sum(p.numel() for p in model.parameters())
    info = train_loop(work, "assistant", model, Batches(stream, 16, 3), minutes, 3e-3, 0.3, lm_loss, held)
    info.update(params=n, heldout_loss=round(heldout_loss(model, held), 4), seed=4567,
                method="sequence-level distillation: 2x target-generated text + 1x corpus",
                generated_tokens_assistant_tok=int(len(gen_stream)))
    model.save_pretrained(work / "assistant")
    tok.save_pretrained(work / "assistant")
    log(work, "assistant", **info)


def make_prompts(heldout, count: int = 24) -> list[str]:
    """Evaluation prompts from held-out files: a function's header and first lines (ends at a line break)."""
    prompts = []
    for rel, text in heldout:
        lines = text.split("\n")
        for i, line in enumerate(lines):
            if line.lstrip().startswith("def ") and line.rstrip().endswith(":") and i + 3 < len(lines):
                snippet = "\n".join(lines[max(0, i - 2) : i + 3]) + "\n"
                if 60 <= len(snippet) <= 400 and "\t" not in snippet:
                    prompts.append(snippet)
                    break
        if len(prompts) == count:
            break
    return prompts


def stage_export(work, out: Path, heldout):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    for src, dst in (("target", "target"), ("same", "assistant_same_tokenizer"), ("assistant", "assistant")):
        model = AutoModelForCausalLM.from_pretrained(work / src, torch_dtype=torch.float32)
        model = model.to(torch.bfloat16)
        target_dir = out / dst
        target_dir.mkdir(parents=True, exist_ok=True)
        for old in target_dir.glob("*"):
            old.unlink()
        model.generation_config.pad_token_id = model.config.pad_token_id
        model.save_pretrained(target_dir, max_shard_size="24MB", safe_serialization=True)
        tok = AutoTokenizer.from_pretrained(work / src)
        if tok.pad_token is None:  # batches need one; as in Llama/GPT-2 practice, reuse an existing token
            tok.pad_token = tok.unk_token if tok.unk_token != tok.eos_token else tok.eos_token
        tok.padding_side = "left"  # decoder-only generation pads on the left
        tok.init_kwargs["padding_side"] = "left"  # persisted in tokenizer_config.json
        tok.save_pretrained(target_dir)
    prompts = make_prompts(heldout)
    (out / "prompts.json").write_text(json.dumps(prompts, indent=1))
    log(work, "export", dir=str(out.name), prompts=len(prompts))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stage", default="all",
                        choices=["all", "tokenizers", "assistant_tokenizer", "target", "same", "gen", "assistant", "export"])
    parser.add_argument("--work_dir", default="embedded_work")
    parser.add_argument("--out_dir", default=str(Path(__file__).resolve().parents[1] / "optimum_uag" / "models"))
    parser.add_argument("--target_minutes", type=float, default=50)
    parser.add_argument("--same_minutes", type=float, default=12)
    parser.add_argument("--gen_minutes", type=float, default=8)
    parser.add_argument("--assistant_minutes", type=float, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--bf16", choices=["auto", "on", "off"], default="auto",
                        help="bf16 autocast for training (auto: only where the CPU has native bf16)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    AUTOCAST["enabled"] = args.bf16 == "on" or (args.bf16 == "auto" and has_native_bf16())
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    train, heldout = corpus_files()
    stages = ["tokenizers", "target", "same", "gen", "assistant", "export"] if args.stage == "all" else [args.stage]
    log(work, "corpus", train_files=len(train), heldout_files=len(heldout),
        python=sysconfig.get_python_version(), torch=torch.__version__,
        bf16_autocast=AUTOCAST["enabled"], threads=args.threads)
    for stage in stages:
        t0 = time.time()
        if stage == "tokenizers":
            build_tokenizers(work, train)
        elif stage == "assistant_tokenizer":
            build_tokenizers(work, train, which="assistant")
        elif stage == "target":
            stage_target(work, train, heldout, args.target_minutes)
        elif stage == "same":
            stage_same(work, args.same_minutes)
        elif stage == "gen":
            stage_gen(work, args.gen_minutes)
        elif stage == "assistant":
            stage_assistant(work, train, heldout, args.assistant_minutes)
        elif stage == "export":
            stage_export(work, Path(args.out_dir), heldout)
        log(work, "wall_minutes", **{stage: round((time.time() - t0) / 60, 1)})


if __name__ == "__main__":
    main()
