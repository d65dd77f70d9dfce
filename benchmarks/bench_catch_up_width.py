"""A/B: SmolLM2's default draft (the adaptive policy over its head) with the head's catch-up block as wide as the last
round committed ("narrow", the shipped default) against the fixed block of the longest chain, 9 positions a row
("wide"); held-out chat requests, interleaved per batch of prompts (the order alternates), median ratio over repeats.

    python benchmarks/bench_catch_up_width.py BATCH REPEATS      # e.g. 4 3, and 1 2"""
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_feature_head import _count, encode, load  # noqa: E402

from optimum_uag import assisted_generate, embedded_models  # noqa: E402
from optimum_uag.engine.drafters import load_feature_head  # noqa: E402
from optimum_uag.engine.drafters.feature import FeatureDrafter  # noqa: E402
from optimum_uag.models import chat_prompts, smollm2  # noqa: E402

NARROW = FeatureDrafter._catch_up


def wide(self, state):
    """The fixed block: the catch-up as if the loop had not passed the last round's committed count."""
    kept, state.round_max_new = state.round_max_new, None
    try:
        NARROW(self, state)
    finally:
        state.round_max_new = kept


def main():
    batch, reps = int(sys.argv[1]), int(sys.argv[2])
    target, tok = load(smollm2())
    head = load_feature_head(embedded_models()["smollm2_head"])
    prompts = chat_prompts()[:8]
    encs = [encode(tok, prompts[i : i + batch]) for i in range(0, 8, batch)]

    def run(mode, enc):
        FeatureDrafter._catch_up = wide if mode == "wide" else NARROW
        t0 = time.perf_counter()
        out = assisted_generate(target, head, enc["input_ids"], enc["attention_mask"], max_new_tokens=128,
                                do_sample=False, pad_token_id=tok.pad_token_id)
        tokens = _count(out.sequences[:, enc["input_ids"].shape[1]:], tok)
        return time.perf_counter() - t0, tokens, out.metrics.draft_seconds

    run("narrow", encs[0])  # warm-up
    ratios = []
    for rep in range(reps):
        acc = {m: [0.0, 0, 0.0] for m in ("narrow", "wide")}  # seconds, tokens, draft seconds
        for i, enc in enumerate(encs):
            for m in (("narrow", "wide") if (i + rep) % 2 == 0 else ("wide", "narrow")):
                for j, v in enumerate(run(m, enc)):
                    acc[m][j] += v
        rate = {m: a[1] / a[0] for m, a in acc.items()}
        ratios.append(rate["narrow"] / rate["wide"])
        print(f"batch {batch} rep {rep}: narrow {rate['narrow']:.1f} tok/s (draft {acc['narrow'][2]:.2f}s), "
              f"wide {rate['wide']:.1f} tok/s (draft {acc['wide'][2]:.2f}s), ratio {ratios[-1]:.3f}", flush=True)
    print("median ratio narrow/wide", round(statistics.median(ratios), 3))


if __name__ == "__main__":
    main()
