#!/usr/bin/env python
"""The adaptive draft length over a grid of pairs: drafts cheaper than the target, as costly, and costlier with a
262k-piece vocabulary, each against the fastest target-only path, transformers' own assisted / UAG generation with
its default policy (20 tokens, confidence stop 0.4), and our best fixed length; one process, eager, fp32, rows
interleaved per prompt (rotating order), repeated, medians (benchmarks/bench_feature_head.py's run_group).

  head          SmolLM2-135M-Instruct + its feature head (cheap: a head step ~0.1 target step): tree fixed vs
                adaptive, greedy batch 1, sampling T=0.7, and batch 4
  distilled     SmolLM2 + the shipped same-tokenizer distilled draft (cheap)
  uag           SmolLM2 + the shipped cross-tokenizer draft (GPT-NeoX, 2 layers: cheap), UAG
  equal         SmolLM2 + a draft as costly as the target: SmolLM2's own weights with Gaussian noise (same
                tokenizer; acceptance of a different model of the same size)
  large-vocab   SmolLM2 + a costlier draft with its own 262,144-piece tokenizer: SmolLM2's noised weights with the
                vocabulary (embedding and tokenizer) grown to 262,144 pieces, ~2x the target's cost per token, UAG
  reversed      the shipped pair the other way: the cross draft (GPT-NeoX, 2 layers) as target, SmolLM2 as its
                draft (a draft ~10x costlier than the target), UAG

    python benchmarks/bench_adaptive.py --output benchmarks/results/adaptive.json
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import random
import tempfile
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

from optimum_uag import assisted_generate, embedded_models
from optimum_uag.engine.drafters import load_feature_head
from optimum_uag.models import chat_prompts, smollm2
from optimum_uag.runners.packed import packed_weights

from bench_feature_head import run_group
from bench_smollm2 import load

LARGE_VOCAB = 262_144


def noised(model, scale: float, seed: int):
    """A copy of `model` with N(0, scale * std(W)) added to every weight matrix: a different model of the same size
    and cost, agreeing with the original on part of its predictions."""
    out = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in out.named_parameters():
            if p.dim() == 2 and "embed" not in name:
                p.add_(torch.randn(p.shape, generator=gen) * p.std() * scale)
    return out


def large_vocab_pair(model, tok, scale: float):
    """SmolLM2's noised weights with the vocabulary grown to LARGE_VOCAB: new embedding rows (tied output rows) of
    small norm, and a tokenizer whose extra pieces no merge produces (tokenization unchanged, every vocabulary-sized
    step as costly as with a 262k vocabulary)."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    draft = noised(model, scale, seed=7)
    hidden = draft.config.hidden_size
    old = draft.get_input_embeddings().weight.data
    new = torch.nn.Embedding(LARGE_VOCAB, hidden)
    with torch.no_grad():
        new.weight.normal_(0.0, 1e-3)
        new.weight[: old.shape[0]] = old
    draft.set_input_embeddings(new)
    draft.lm_head = torch.nn.Linear(hidden, LARGE_VOCAB, bias=False)
    draft.lm_head.weight = new.weight  # tied, as SmolLM2's
    draft.config.vocab_size = LARGE_VOCAB
    spec = json.loads(tok.backend_tokenizer.to_str())
    vocab = spec["model"]["vocab"]
    rng = random.Random(0)
    alphabet = "abcdefghijklmnopqrstuvwxyz"
    while len(vocab) < LARGE_VOCAB:
        vocab.setdefault("".join(rng.choice(alphabet) for _ in range(rng.randint(9, 14))) + "\u0120", len(vocab))
    big = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(spec)), eos_token=tok.eos_token,
                                  pad_token=tok.pad_token, bos_token=tok.bos_token, clean_up_tokenization_spaces=False)
    big.padding_side = "left"
    big.chat_template = tok.chat_template
    return draft.eval(), big


def hf_default(draft):
    """The draft with transformers' default assisted-generation policy on its generation_config (where transformers
    reads it): 20 tokens, constant, stopped below confidence 0.4."""
    defaults = getattr(GenerationConfig, "_get_default_generation_params", None)
    defaults = defaults() if defaults is not None else GenerationConfig().to_dict()
    out = copy.copy(draft)
    out.generation_config = copy.deepcopy(draft.generation_config)
    for key in ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold"):
        setattr(out.generation_config, key, defaults[key])
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--max_new_tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--noise", type=float, default=0.25, help="noise scale of the equal-cost / large-vocab drafts")
    p.add_argument("--only", default="", help="comma-separated groups to run (default: all)")
    p.add_argument("--output", default=None)
    p.add_argument("--merge", action="store_true", help="replace only the groups run here in an existing --output")
    args = p.parse_args()
    only = set(filter(None, args.only.split(",")))
    target, tok = load(smollm2())
    head = load_feature_head(embedded_models()["smollm2_head"])
    same = load(embedded_models()["smollm2_assistant"])[0]
    cross, ctok = load(embedded_models()["smollm2_assistant_cross"])
    prompts = chat_prompts()[: args.prompts * 4]
    greedy = dict(do_sample=False)
    sample = dict(do_sample=True, temperature=0.7, top_k=0, top_p=1.0)

    def rows_for(model, model_tok, draft=None, draft_tok=None, hf=True, fixed=None, gen=greedy, extra=None):
        """target-only (plain, prepacked), transformers' assisted/UAG (default policy), ours fixed, ours adaptive."""
        pack = packed_weights(model)
        g = dict(gen, pad_token_id=model_tok.pad_token_id)
        pair = {}
        if draft_tok is not None:
            pair = dict(tokenizer=model_tok, assistant_tokenizer=draft_tok)

        configs = {}  # one explicit config per length: transformers' fastest call (no keywords to re-derive it)

        def config(m):
            if m not in configs:
                configs[m] = copy.deepcopy(model.generation_config)
                configs[m].update(**g, max_new_tokens=m)
            return configs[m]

        def target_only(enc, m):
            return model.generate(**enc, generation_config=config(m))

        def packed(enc, m):
            with pack:
                return model.generate(**enc, generation_config=config(m))

        rows = {"target-only": target_only, "target-only prepacked": packed}
        if hf:
            theirs = hf_default(draft)
            rows["transformers (default policy)"] = lambda enc, m: model.generate(
                **enc, max_new_tokens=m, assistant_model=theirs, **pair, **g)
        opts = dict(extra or {})
        name, fixed_opts = fixed
        rows[f"optimum-uag fixed {name}"] = lambda enc, m: assisted_generate(
            model, draft, enc["input_ids"], enc["attention_mask"], max_new_tokens=m, draft_policy="fixed",
            **fixed_opts, **pair, **opts, **g)
        rows["optimum-uag adaptive"] = lambda enc, m: assisted_generate(
            model, draft, enc["input_ids"], enc["attention_mask"], max_new_tokens=m, **pair, **opts, **g)
        return rows

    groups = {
        "head@1": lambda: (target, tok, 1, greedy, rows_for(target, tok, head, hf=False, fixed=("tree", {}))),
        "head-sample@1": lambda: (target, tok, 1, sample, rows_for(target, tok, head, hf=False, fixed=("tree", {}),
                                                                  gen=sample)),
        "head@4": lambda: (target, tok, 4, greedy, rows_for(target, tok, head, hf=False, fixed=("chain K=3", {}))),
        "distilled@1": lambda: (target, tok, 1, greedy, rows_for(target, tok, same,
                                                                 fixed=("K=3", dict(num_assistant_tokens=3)))),
        "uag@1": lambda: (target, tok, 1, greedy, rows_for(target, tok, cross, ctok,
                                                           fixed=("K=5", dict(num_assistant_tokens=5)))),
        "equal@1": lambda: (target, tok, 1, greedy, rows_for(target, tok, noised(target, args.noise, 3),
                                                             fixed=("K=5", dict(num_assistant_tokens=5)))),
        "large-vocab@1": lambda: (target, tok, 1, greedy, rows_for(
            target, tok, *large_vocab_pair(target, tok, args.noise), fixed=("K=5", dict(num_assistant_tokens=5)))),
        "reversed@1": lambda: (cross, ctok, 1, greedy, rows_for(cross, ctok, target, tok,
                                                                fixed=("K=5", dict(num_assistant_tokens=5)))),
    }
    results = {}
    for group, build in groups.items():
        if only and group not in only:
            continue
        model, model_tok, batch, gen, rows = build()
        warm = _encode(model_tok, prompts[-1:])
        for fn in rows.values():  # warm-up: first allocations, packing
            torch.manual_seed(0)
            fn(warm, 8)
        res = run_group(group, rows, prompts[: args.prompts * batch], batch, args.max_new_tokens, model_tok,
                        args.repeats, encode=_encode)
        r = res["rows"]
        hf = r.get("transformers (default policy)")
        for name, row in r.items():
            if name.startswith("optimum-uag") and hf is not None:
                row["speedup_vs_transformers_assisted"] = row["tokens_per_s"] / hf["tokens_per_s"]
        fixed = next(name for name in r if name.startswith("optimum-uag fixed"))
        r["optimum-uag adaptive"]["vs_fixed"] = r["optimum-uag adaptive"]["tokens_per_s"] / r[fixed]["tokens_per_s"]
        results[group] = res
    print(f"\n{'group':<15}{'row':<34}{'tok/s':>7}{'vs best':>9}{'vs hf':>8}{'tau':>6}{'K':>6}{'off':>6}{'exact':>7}")
    for group, res in results.items():
        for name, r in res["rows"].items():
            tau = f"{r['tau']:.2f}" if "tau" in r else "-"
            k = f"{r['mean_draft_length']:.1f}" if r.get("mean_draft_length") is not None else "-"
            off = f"{r['rounds_without_draft_share']:.0%}" if r.get("rounds_without_draft_share") is not None else "-"
            hf = f"{r['speedup_vs_transformers_assisted']:.2f}x" if "speedup_vs_transformers_assisted" in r else "-"
            print(f"{group:<15}{name:<34}{r['tokens_per_s']:>7.1f}{r['speedup_vs_best_target_only']:>8.2f}x"
                  f"{hf:>8}{tau:>6}{k:>6}{off:>6}{str(r.get('exact', '-')):>7}")
    summary = {"date": time.strftime("%Y-%m-%d"), "target": "SmolLM2-135M-Instruct (reversed: smollm2_assistant_cross)",
               "dtype": "float32", "prompts": args.prompts, "max_new_tokens": args.max_new_tokens,
               "repeats": args.repeats, "noise": args.noise,
               "command": "python benchmarks/bench_adaptive.py --output benchmarks/results/adaptive.json",
               "groups": results}
    if args.output:
        if args.merge and os.path.exists(args.output):
            with open(args.output) as f:
                earlier = json.load(f)
            summary["groups"] = {**earlier.get("groups", {}), **results}
            summary["merged"] = f"groups {sorted(results)} rerun {summary['date']}; the others from the earlier run"
        with open(args.output, "w") as f:
            json.dump(summary, f, indent=1, default=str)


def _encode(tok, prompts):
    texts = [tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=False)
             if tok.chat_template else q for q in prompts]
    return tok(texts, return_tensors="pt", padding=True, add_special_tokens=False, return_token_type_ids=False)


if __name__ == "__main__":
    main()
