"""A/B: SmolLM2's default draft (the adaptive policy over its head) with the head's catch-up block as wide as the last
round committed ("narrow", the shipped default) against the fixed block of the longest chain, 9 positions a row
("wide"); held-out chat requests, interleaved per batch of prompts (the order alternates), median ratio over repeats.

    python benchmarks/bench_catch_up_width.py BATCH REPEATS      # e.g. 4 3, and 1 2"""
import sys, time, statistics, torch
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
from bench_feature_head import encode, _count, load
from optimum_uag import assisted_generate, embedded_models
from optimum_uag.engine.drafters import load_feature_head
from optimum_uag.engine.drafters.feature import FeatureDrafter
from optimum_uag.models import chat_prompts, smollm2
target, tok = load(smollm2())
head = load_feature_head(embedded_models()["smollm2_head"])
original = FeatureDrafter._catch_up
def wide(self, state):
    kept = state.round_max_new; state.round_max_new = None
    try: original(self, state)
    finally: state.round_max_new = kept
prompts = chat_prompts()[:8]
batch = int(sys.argv[1]); reps = int(sys.argv[2])
greedy = dict(do_sample=False, pad_token_id=tok.pad_token_id)
encs = [encode(tok, prompts[i:i + batch]) for i in range(0, 8, batch)]
def run(mode, enc):
    FeatureDrafter._catch_up = wide if mode == "wide" else original
    t0 = time.perf_counter()
    out = assisted_generate(target, head, enc["input_ids"], enc["attention_mask"], max_new_tokens=128, **greedy)
    return time.perf_counter() - t0, _count(out.sequences[:, enc["input_ids"].shape[1]:], tok), out.metrics.draft_seconds
run("narrow", encs[0])
ratios = []
for rep in range(reps):
    acc = {m: [0.0, 0, 0.0] for m in ("narrow", "wide")}
    for i, enc in enumerate(encs):
        for m in (("narrow", "wide") if (i + rep) % 2 == 0 else ("wide", "narrow")):
            s, n, d = run(m, enc)
            acc[m][0] += s; acc[m][1] += n; acc[m][2] += d
    r = (acc["narrow"][1] / acc["narrow"][0]) / (acc["wide"][1] / acc["wide"][0])
    ratios.append(r)
    print(f"batch {batch} rep {rep}: narrow {acc['narrow'][1]/acc['narrow'][0]:.1f} tok/s (draft {acc['narrow'][2]:.2f}s), wide {acc['wide'][1]/acc['wide'][0]:.1f} tok/s (draft {acc['wide'][2]:.2f}s), ratio {r:.3f}", flush=True)
print("median ratio narrow/wide", round(statistics.median(ratios), 3))
