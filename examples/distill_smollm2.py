#!/usr/bin/env python
"""Distil the two SmolLM2 drafts shipped with optimum-uag from SmolLM2-135M-Instruct itself, on CPU.

Stages (each writes into --work_dir and appends to --work_dir/log.json; run in order or one at a time):
  gen          SmolLM2 answers the training chat requests (optimum_uag.models.prompt_sets, disjoint from the
               held-out set): pass 0 greedy, then sampled passes (T=0.7, T=1.0) until --gen_minutes; the top-16
               log-probabilities of the target at every answer position are recorded on the way (logit distillation
               without a second teacher pass)
  score        teacher-forced logits on text (cheaper per token than generating): SmolLM2's top-16 log-probabilities at
               every position of --score_minutes worth of 256-token chunks of the interpreter's standard library and of
               the installed packages' descriptions (METADATA: English prose in Markdown), saved as score.pt
  same         `smollm2_assistant`: a Llama with SmolLM2's own tokenizer, embeddings initialised from a PCA of
               SmolLM2's embedding matrix; loss 0.8 KL(top-16 teacher || draft) + 0.2 CE on the answers
               (sequence-level + logit distillation); --text_share of the draws are scored text chunks
  cross_tok    the cross draft's own tokenizer: Llama/SentencePiece style BPE with byte fallback ('▁', <0xNN>),
               8192 pieces, trained on the generated text (so it differs from SmolLM2's byte-level BPE)
  cross        `smollm2_assistant_cross`: a GPT-NeoX trained (CE) on the same conversations re-tokenized with that
               tokenizer (and --text_share of scored text); each piece's embedding starts as the mean of the
               PCA-projected SmolLM2 embeddings of the SmolLM2 tokens of its text
  export       fp16 safetensors + tokenizers into optimum_uag/models/
  eval         tau of both drafts with optimum-uag on the held-out chat prompts (greedy, 128 new tokens)

    python examples/distill_smollm2.py --stage all
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_embedded_models import llama_style_bpe, log, lr_at, seed_all  # noqa: E402

TOPK = 16
MAX_NEW = 160
POSITIONS = 48  # answer positions per conversation that get the (expensive) LM head in a training step


def teacher(dtype=torch.float32):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from optimum_uag.models import smollm2

    path = smollm2()
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=dtype).eval()
    return model, tok


def chat_ids(tok, prompt: str) -> list[int]:
    return tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True)


# ------------------------------------------------------------------------------------------------ gen
class TopKRecorder:
    """A logits processor that records the target's top-k log-probabilities at every step and changes nothing."""

    def __init__(self):
        self.values, self.indices = [], []

    def __call__(self, input_ids, scores):
        logp = torch.log_softmax(scores.float(), dim=-1)
        v, i = logp.topk(TOPK, dim=-1)
        self.values.append(v.half())
        self.indices.append(i.int())
        return scores


def stage_gen(work: Path, minutes: float, batch: int) -> None:
    from transformers import LogitsProcessorList

    from optimum_uag.models.prompt_sets import training_chat_prompts

    model, tok = teacher()
    tok.padding_side = "left"
    prompts = training_chat_prompts()
    out_path = work / "gen.pt"
    records = torch.load(out_path, weights_only=False) if out_path.exists() else []  # resume
    done_keys = {(r["pass"], r["prompt"]) for r in records}
    t0 = time.time()
    passes = [dict(do_sample=False), dict(do_sample=True, temperature=0.7), dict(do_sample=True, temperature=1.0, top_p=0.95)]
    for pass_no, mode in enumerate(passes):
        torch.manual_seed(3456 + pass_no)
        order = sorted((i for i in range(len(prompts)) if (pass_no, prompts[i]) not in done_keys),
                       key=lambda i: len(chat_ids(tok, prompts[i])))
        for start in range(0, len(order), batch):
            if time.time() - t0 > minutes * 60:
                break
            idx = order[start : start + batch]
            enc = tok.apply_chat_template([[{"role": "user", "content": prompts[i]}] for i in idx],
                                          add_generation_prompt=True, return_tensors="pt", padding=True, return_dict=True)
            rec = TopKRecorder()
            with torch.no_grad():
                out = model.generate(**enc, max_new_tokens=MAX_NEW, logits_processor=LogitsProcessorList([rec]),
                                     pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, **mode)
            new = out[:, enc["input_ids"].shape[1]:]
            values, indices = torch.stack(rec.values, 1), torch.stack(rec.indices, 1)
            for r, i in enumerate(idx):
                row = new[r].tolist()
                n = row.index(tok.eos_token_id) + 1 if tok.eos_token_id in row else len(row)
                records.append({"prompt": prompts[i], "prompt_ids": chat_ids(tok, prompts[i]), "answer_ids": row[:n],
                                "top_v": values[r, :n].clone(), "top_i": indices[r, :n].clone(), "pass": pass_no})
            done = sum(len(r["answer_ids"]) for r in records)
            print(f"[gen] pass {pass_no} {start + len(idx)}/{len(order)} sequences {len(records)} answer tokens {done} "
                  f"{time.time() - t0:.0f}s", flush=True)
            torch.save(records, out_path)
    log(work, "gen", sequences=len(records), answer_tokens=sum(len(r["answer_ids"]) for r in records),
        minutes=round((time.time() - t0) / 60, 1), passes=[str(p) for p in passes], max_new_tokens=MAX_NEW)


# ---------------------------------------------------------------------------------------------- score
def text_chunks(tok, length: int, max_chars: int = 2_500_000) -> list[list[int]]:
    """256-token chunks alternating Python (standard library) and prose (package descriptions), deduplicated,
    in a fixed shuffled order (so a time-budgeted run takes a prefix of the same list)."""
    import random
    from importlib import metadata

    from train_embedded_models import corpus_files

    skip = ("encodings/", "test/", "idlelib/", "lib2to3/", "pydoc_data/", "unicodedata", "_pydecimal")
    code = [text for rel, text in corpus_files()[0] if not rel.startswith(skip)]
    seen, prose = set(), []
    for dist in metadata.distributions():
        body = dist.metadata.get_payload() or ""
        if len(body) > 500 and body not in seen:
            seen.add(body)
            prose.append(body)
    out = []
    for texts in (code, prose):
        texts = sorted(texts)
        random.Random(7).shuffle(texts)
        ids, chars = [], 0
        for text in texts:
            if chars > max_chars:
                break
            chars += len(text)
            ids.extend(tok(text)["input_ids"] + [tok.eos_token_id])
        chunks = [ids[i : i + length] for i in range(0, len(ids) - length, length)]
        random.Random(11).shuffle(chunks)
        out.append(chunks)
    return [c for pair in zip(*out) for c in pair]


def stage_score(work: Path, minutes: float, batch: int, length: int = 256) -> None:
    model, tok = teacher()
    chunks = text_chunks(tok, length)
    out_path = work / "score.pt"
    records = torch.load(out_path, weights_only=False) if out_path.exists() else []  # resume
    t0 = time.time()
    for start in range(len(records), len(chunks), batch):
        if time.time() - t0 > minutes * 60:
            break
        ids = torch.tensor(chunks[start : start + batch])
        with torch.no_grad():
            logp = torch.log_softmax(model(ids).logits[:, :-1].float(), -1)
        v, i = logp.topk(TOPK, dim=-1)
        for r in range(ids.shape[0]):
            row = ids[r].tolist()
            records.append({"prompt": None, "prompt_ids": row[:1], "answer_ids": row[1:], "top_v": v[r].half(),
                            "top_i": i[r].int(), "pass": "text"})
        print(f"[score] {len(records)}/{len(chunks)} chunks {sum(len(r['answer_ids']) for r in records)} tokens "
              f"{time.time() - t0:.0f}s", flush=True)
        torch.save(records, out_path)
    log(work, "score", chunks=len(records), tokens=sum(len(r["answer_ids"]) for r in records), chunk_tokens=length,
        minutes=round((time.time() - t0) / 60, 1))


# ----------------------------------------------------------------------------------------------- train
def padded(rows: list[list[int]], pad: int) -> torch.Tensor:
    width = max(map(len, rows))
    return torch.tensor([r + [pad] * (width - len(r)) for r in rows])


def train(work, name, model, make_batch, weights, minutes, peak_lr, batch) -> dict:
    """Time-budgeted AdamW with a cosine schedule sized from the first 10 steps; items drawn by weight."""
    opt = torch.optim.AdamW(model.parameters(), lr=peak_lr, betas=(0.9, 0.95), weight_decay=0.05)
    gen = torch.Generator().manual_seed(5678)
    model.train()
    t0, step, total, losses = time.time(), 0, None, []
    while total is None or step < total:
        if total is None and step == 10:
            total = max(50, int(minutes * 60 / ((time.time() - t0) / 10)))
            print(f"[{name}] {(time.time() - t0) / 10:.3f}s/step -> {total} steps", flush=True)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, 30, total or 1000, peak_lr)
        idx = torch.multinomial(weights, batch, replacement=True, generator=gen).tolist()
        loss = make_batch(model, idx)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        step += 1
        if step % 50 == 0:
            print(f"[{name}] step {step}/{total} loss {np.mean(losses[-50:]):.3f} {time.time() - t0:.0f}s", flush=True)
    model.eval()
    return {"steps": step, "minutes": round((time.time() - t0) / 60, 1), "final_loss": round(float(np.mean(losses[-50:])), 4)}


def training_records(work: Path, text_share: float):
    """SmolLM2's chat answers (gen.pt) and, if scored, text chunks (score.pt); weights give the text chunks
    `text_share` of the draws."""
    records = torch.load(work / "gen.pt", weights_only=False)
    text = torch.load(work / "score.pt", weights_only=False) if (work / "score.pt").exists() and text_share > 0 else []
    weights = torch.tensor([(1 - text_share) / len(records)] * len(records) + [text_share / max(1, len(text))] * len(text))
    return records + text, weights


def stage_same(work: Path, minutes: float, hidden: int, layers: int, batch: int, name: str = "smollm2_assistant",
               text_share: float = 0.3) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    seed_all(2345)
    records, weights = training_records(work, text_share)
    big, tok = teacher()
    init = teacher_embedding_pca(big, hidden)  # a head start for the draft's (tied) embedding/LM head
    del big
    cfg = LlamaConfig(
        vocab_size=init.shape[0], hidden_size=hidden, intermediate_size=hidden * 4, num_hidden_layers=layers,
        num_attention_heads=max(2, hidden // 64), num_key_value_heads=max(1, hidden // 128), head_dim=64,
        max_position_embeddings=8192, rope_theta=100000.0, tie_word_embeddings=True, rms_norm_eps=1e-5,
        bos_token_id=1, eos_token_id=2, pad_token_id=2, torch_dtype="float16",
    )
    model = LlamaForCausalLM(cfg)
    model.get_input_embeddings().weight.data.copy_(init)
    vocab = cfg.vocab_size

    gen = torch.Generator().manual_seed(7)

    def make_batch(m, idx):
        """Hidden states for whole conversations; the LM head (the costly part: 49,152 x hidden) only at up to
        POSITIONS random answer positions per conversation: 0.8 KL to the top-16 teacher + 0.2 CE."""
        rows = [records[i]["prompt_ids"] + records[i]["answer_ids"] for i in idx]
        ids = padded(rows, tok.pad_token_id)
        hidden = m.model(ids[:, :-1]).last_hidden_state
        picks, targets, top_i, top_v = [], [], [], []
        for b, i in enumerate(idx):
            p, a = len(records[i]["prompt_ids"]), len(records[i]["answer_ids"])
            chosen = torch.randperm(a, generator=gen)[:POSITIONS]
            picks.append(hidden[b, p - 1 + chosen])
            targets.append(ids[b, p + chosen])
            top_i.append(records[i]["top_i"][chosen].long())
            top_v.append(records[i]["top_v"][chosen].float())
        logp = torch.log_softmax(m.lm_head(torch.cat(picks)).float(), -1)
        tp = torch.softmax(torch.cat(top_v), -1)  # renormalised top-k teacher distribution
        kl = -(tp * logp.gather(-1, torch.cat(top_i))).sum(-1).mean()
        ce = -logp.gather(-1, torch.cat(targets)[:, None]).mean()
        return 0.8 * kl + 0.2 * ce

    stats = train(work, "same", model, make_batch, weights, minutes, 3e-3, batch)
    model.save_pretrained(work / name)
    tok.save_pretrained(work / name)
    log(work, name, hidden=hidden, layers=layers, params=sum(p.numel() for p in model.parameters()),
        vocab=vocab, items=len(records), text_share=text_share, **stats)


def conversation_texts(records, tok) -> list[str]:
    """Each record as the exact text the target sees: chat-templated prompt + answer (with <|im_end|>)."""
    return [tok.decode(r["prompt_ids"] + r["answer_ids"], skip_special_tokens=False) for r in records]


def stage_cross_tok(work: Path, vocab: int) -> None:
    from transformers import AutoTokenizer

    records = torch.load(work / "gen.pt", weights_only=False)
    from optimum_uag.models import smollm2

    tok = AutoTokenizer.from_pretrained(smollm2())
    lines = [line for text in conversation_texts(records, tok) for line in text.split("\n") if line.strip()]
    draft_tok = llama_style_bpe(lines, vocab, limit_alphabet=1000)
    draft_tok.save_pretrained(work / "tok_cross")
    log(work, "cross_tok", vocab=len(draft_tok), lines=len(lines))


def teacher_embedding_pca(big, hidden: int) -> torch.Tensor:
    """SmolLM2's embedding matrix projected on its first `hidden` principal components, scaled to std 0.02."""
    emb = big.get_input_embeddings().weight.detach()
    mean = emb.mean(0, keepdim=True)
    _, _, v = torch.pca_lowrank(emb - mean, q=hidden, center=False, niter=4)
    init = (emb - mean) @ v
    return init * (0.02 / init.std())


def cross_embedding_init(big, ttok, dtok, hidden: int) -> torch.Tensor:
    """A head start for a draft with ANOTHER tokenizer: each draft piece's text is tokenized by SmolLM2 and gets the
    mean of those tokens' PCA-projected SmolLM2 embeddings (byte and special pieces: small random)."""
    pca = teacher_embedding_pca(big, hidden)
    init = torch.randn(len(dtok), hidden) * 0.02
    for piece, i in dtok.get_vocab().items():
        if piece.startswith("<") and piece.endswith(">"):
            continue
        ids = ttok(piece.replace("▁", " "), add_special_tokens=False)["input_ids"]
        if ids:
            init[i] = pca[ids].mean(0)
    return init


def stage_cross(work: Path, minutes: float, hidden: int, layers: int, batch: int, text_share: float = 0.3) -> None:
    from transformers import AutoTokenizer, GPTNeoXConfig, GPTNeoXForCausalLM

    seed_all(4567)
    records, weights = training_records(work, text_share)
    big, ttok = teacher()
    dtok = AutoTokenizer.from_pretrained(work / "tok_cross")
    texts = conversation_texts(records, ttok)
    enc = [dtok(t)["input_ids"] for t in texts]
    cfg = GPTNeoXConfig(
        vocab_size=len(dtok), hidden_size=hidden, intermediate_size=hidden * 4, num_hidden_layers=layers,
        num_attention_heads=max(2, hidden // 64), rotary_pct=0.5, max_position_embeddings=4096, tie_word_embeddings=True,
        use_parallel_residual=True, bos_token_id=dtok.bos_token_id, eos_token_id=dtok.eos_token_id,
        pad_token_id=dtok.pad_token_id, torch_dtype="float16",
    )
    model = GPTNeoXForCausalLM(cfg)
    model.get_input_embeddings().weight.data.copy_(cross_embedding_init(big, ttok, dtok, hidden))
    del big

    def make_batch(m, idx):
        rows = [enc[i] for i in idx]
        ids = padded(rows, dtok.pad_token_id)
        mask = padded([[1] * len(r) for r in rows], 0)
        logits = m(ids[:, :-1]).logits.float()
        nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none")
        keep = mask[:, 1:].reshape(-1).float()
        return (nll * keep).sum() / keep.sum()

    stats = train(work, "cross", model, make_batch, weights, minutes, 3e-3, batch)
    model.save_pretrained(work / "smollm2_assistant_cross")
    dtok.save_pretrained(work / "smollm2_assistant_cross")
    log(work, "cross", hidden=hidden, layers=layers, params=sum(p.numel() for p in model.parameters()), vocab=len(dtok),
        tokens=sum(map(len, enc)), items=len(enc), text_share=text_share, **stats)


# ---------------------------------------------------------------------------------------------- export/eval
def stage_export(work: Path, out: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    for name in ("smollm2_assistant", "smollm2_assistant_cross"):
        model = AutoModelForCausalLM.from_pretrained(work / name, torch_dtype=torch.float16)
        model.generation_config.do_sample = False
        dest = out / name
        dest.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(dest, safe_serialization=True, max_shard_size="24MB")
        AutoTokenizer.from_pretrained(work / name).save_pretrained(dest)
        size = sum(f.stat().st_size for f in dest.iterdir()) / 1e6
        log(work, "export", **{name: f"{size:.1f} MB"})


def stage_eval(work: Path, n_prompts: int, max_new_tokens: int) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from optimum_uag import assisted_generate
    from optimum_uag.models.prompt_sets import heldout_chat_prompts

    model, tok = teacher()
    results = {}
    for name in ("smollm2_assistant", "smollm2_assistant_cross"):
        draft = AutoModelForCausalLM.from_pretrained(work / name, torch_dtype=torch.float32).eval()
        dtok = AutoTokenizer.from_pretrained(work / name)
        new, calls = 0, 0
        for prompt in heldout_chat_prompts()[:n_prompts]:
            ids = torch.tensor([chat_ids(tok, prompt)])
            out = assisted_generate(model, draft, input_ids=ids, attention_mask=torch.ones_like(ids), tokenizer=tok,
                                    assistant_tokenizer=dtok, max_new_tokens=max_new_tokens, num_assistant_tokens=5)
            new += out.metrics.generated_tokens
            calls += out.metrics.row_target_calls
        results[name] = {"tau": round(new / calls, 3), "new_tokens": new, "target_calls": calls}
        print(name, results[name], flush=True)
    log(work, "eval", prompts=n_prompts, max_new_tokens=max_new_tokens, **results)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stage", default="all", choices=["all", "gen", "score", "same", "cross_tok", "cross", "export", "eval"])
    parser.add_argument("--work_dir", default="smollm2_distill")
    parser.add_argument("--out_dir", default=str(Path(__file__).resolve().parents[1] / "optimum_uag" / "models"))
    parser.add_argument("--gen_minutes", type=float, default=25)
    parser.add_argument("--gen_batch", type=int, default=24)
    parser.add_argument("--score_minutes", type=float, default=15)
    parser.add_argument("--score_batch", type=int, default=8)
    parser.add_argument("--text_share", type=float, default=0.3, help="share of training draws from the scored text")
    parser.add_argument("--same_minutes", type=float, default=25)
    parser.add_argument("--same_hidden", type=int, default=128)
    parser.add_argument("--same_layers", type=int, default=2)
    parser.add_argument("--same_out", default="smollm2_assistant", help="directory name under --work_dir")
    parser.add_argument("--cross_minutes", type=float, default=15)
    parser.add_argument("--cross_hidden", type=int, default=192)
    parser.add_argument("--cross_layers", type=int, default=2)
    parser.add_argument("--cross_vocab", type=int, default=8192)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--eval_prompts", type=int, default=12)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    stages = ["gen", "score", "same", "cross_tok", "cross", "export", "eval"] if args.stage == "all" else [args.stage]
    for stage in stages:
        if stage == "gen":
            stage_gen(work, args.gen_minutes, args.gen_batch)
        elif stage == "score":
            stage_score(work, args.score_minutes, args.score_batch)
        elif stage == "same":
            stage_same(work, args.same_minutes, args.same_hidden, args.same_layers, args.batch, args.same_out,
                       args.text_share)
        elif stage == "cross_tok":
            stage_cross_tok(work, args.cross_vocab)
        elif stage == "cross":
            stage_cross(work, args.cross_minutes, args.cross_hidden, args.cross_layers, args.batch, args.text_share)
        elif stage == "export":
            stage_export(work, Path(args.out_dir))
        elif stage == "eval":
            stage_eval(work, args.eval_prompts, 128)


if __name__ == "__main__":
    main()
