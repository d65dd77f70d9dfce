#!/usr/bin/env python
"""UAG with a large-vocabulary draft (~256k tokens, as Gemma 3's), ours vs transformers' UAG, side by side.

The draft is a tiny random Gemma-3 text model (2 layers, hidden 64, vocabulary 262,144) with a byte-level BPE
tokenizer of 262,144 pieces (trained pieces + synthetic ones, so that every vocabulary-sized step costs what it
costs with Gemma's tokenizer); the target is the embedded 25M Llama. Greedy, batch 1; outputs checked identical.

    python benchmarks/bench_uag_large_vocab.py [--profile]
"""
from __future__ import annotations

import argparse
import copy
import json
import random
import time

import torch


def big_tokenizer(size: int = 262_144):
    """A byte-level BPE trained on a little text, its vocabulary padded with synthetic pieces to `size`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from optimum_uag import eval_prompts

    trained = Tokenizer(models.BPE())
    trained.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    from tokenizers import trainers

    trainer = trainers.BpeTrainer(vocab_size=4000, special_tokens=["<eos>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    trained.train_from_iterator(eval_prompts() * 4, trainer)
    spec = json.loads(trained.to_str())
    vocab, merges = spec["model"]["vocab"], spec["model"]["merges"]
    rng = random.Random(0)
    alphabet = "abcdefghijklmnopqrstuvwxyzĠ"
    while len(vocab) < size:  # pieces the pre-tokenized text never produces: vocabulary size, not behaviour
        piece = "".join(rng.choice(alphabet) for _ in range(rng.randint(7, 12)))
        vocab.setdefault(piece, len(vocab))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[tuple(m) if isinstance(m, list) else tuple(m.split(" "))
                                                    for m in merges]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    out = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<eos>", bos_token="<eos>",
                                  clean_up_tokenization_spaces=False)
    out.padding_side = "left"
    return out


def gemma3_draft(vocab: int):
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    config = Gemma3TextConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                              num_attention_heads=2, num_key_value_heads=1, head_dim=32, sliding_window=64,
                              max_position_embeddings=2048, pad_token_id=0, eos_token_id=0, bos_token_id=0)
    torch.manual_seed(0)
    return Gemma3ForCausalLM(config).eval()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompts", type=int, default=4)
    p.add_argument("--max_new_tokens", type=int, default=48)
    p.add_argument("--k", type=int, default=5)
    p.add_argument("--profile", action="store_true", help="cProfile optimum-uag's row (top 25 by cumulative time)")
    p.add_argument("--output", default=None)
    args = p.parse_args()
    from optimum_uag import assisted_generate, eval_prompts, load_embedded

    target, tok = load_embedded("target")
    dtok = big_tokenizer()
    draft = gemma3_draft(len(dtok))
    hf_draft = copy.deepcopy(draft)
    hf_draft.generation_config.num_assistant_tokens = args.k
    hf_draft.generation_config.num_assistant_tokens_schedule = "constant"
    hf_draft.generation_config.assistant_confidence_threshold = 0.0
    prompts = eval_prompts()[: args.prompts]
    encs = [tok([q], return_tensors="pt", return_token_type_ids=False) for q in prompts]
    gen = dict(max_new_tokens=args.max_new_tokens, do_sample=False, pad_token_id=tok.pad_token_id)
    methods = {
        "target-only": lambda e: target.generate(**e, **gen),
        "transformers UAG": lambda e: target.generate(**e, assistant_model=hf_draft, tokenizer=tok,
                                                      assistant_tokenizer=dtok, **gen),
        "optimum-uag UAG": lambda e: assisted_generate(target, draft, **e, tokenizer=tok, assistant_tokenizer=dtok,
                                                       num_assistant_tokens=args.k, **gen).sequences,
    }
    for fn in methods.values():  # warm-up (first-call costs: vocabulary maps, allocations)
        fn(encs[0])
    rows, outs = {}, {}
    for name, fn in methods.items():
        t0 = time.perf_counter()
        outs[name] = [fn(e) for e in encs]
        rows[name] = {"seconds": time.perf_counter() - t0}
    for name in methods:
        rows[name]["exact"] = all(torch.equal(a, b) for a, b in zip(outs[name], outs["target-only"]))
        rows[name]["vs_target"] = rows["target-only"]["seconds"] / rows[name]["seconds"]
    rows["optimum-uag UAG"]["vs_transformers"] = rows["transformers UAG"]["seconds"] / rows["optimum-uag UAG"]["seconds"]
    print(f"draft vocabulary {len(dtok)}, K={args.k}, {args.prompts} prompts x {args.max_new_tokens} new tokens")
    for name, r in rows.items():
        print(f"{name:<20} {r['seconds']:7.2f} s  vs target {r['vs_target']:.2f}x  exact {r['exact']}"
              + (f"  vs transformers {r['vs_transformers']:.2f}x" if "vs_transformers" in r else ""))
    if args.profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        prof.enable()
        for e in encs:
            methods["optimum-uag UAG"](e)
        prof.disable()
        pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
    if args.output:
        with open(args.output, "w") as f:
            json.dump({"vocab": len(dtok), "k": args.k, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
