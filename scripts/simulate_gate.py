"""Simulate the adaptive chain's gate (engine/policy.py AdaptivePolicy.gate) at batch > 1 on a head's real draft
probabilities: which rows' drafts a round verifies, and what that earns, without timing noise from this CPU.

Per held-out answer position: the head's top-1 probability and whether it agrees with the target, for drafting
steps 1..3 (teacher-forced, as training/feature.py evaluate_head). Each simulated round draws `batch` positions;
its cost, relative to a round without a draft, is `overhead` + `head` per head step + the verify of K + 1 tokens per
row over one, read from benchmarks/results/feature_head.json: "verify_cost_batch4" (batch 4, W tokens per row) where
the benchmark measured it, else "verify_cost" (one row of n tokens, a proxy for batch x (K + 1)). Timings drift
slowly (a sine, 25%) and jitter per round (8%), as this CPU does; the policy sees them, the rate is counted without
them.

    python scripts/simulate_gate.py --features W7/features/eval --head optimum_uag/models/smollm2_head

`--features`: a folder of feature shards (optimum-uag train-draft --eval_dataset writes WORK_DIR/eval)."""
import argparse
import json
import math
import random
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import optimum_uag.engine.policy as policy_module  # noqa: E402
from optimum_uag.engine.drafters.feature_head import load_feature_head  # noqa: E402
from optimum_uag.training.feature import _batch, load_shards  # noqa: E402


@torch.no_grad()
def positions(features: str, head_path: str, steps: int = 3):
    """(p, ok): (N, steps) top-1 draft probability and agreement at each held-out answer position."""
    from transformers import AutoModelForCausalLM

    from optimum_uag.models import smollm2

    model = AutoModelForCausalLM.from_pretrained(smollm2(), dtype=torch.float32)
    head = load_feature_head(head_path, dtype=torch.float32).eval()
    embed = model.get_input_embeddings()
    ps, oks = [], []
    for rec in load_shards(features):
        if len(rec["ids"]) < steps + 3:
            continue
        feats, toks, _, ti, keep = _batch([rec], [(0, 0)], max(384, len(rec["ids"])), steps, "cpu", head.feature_size)
        length = feats.shape[1] - steps
        outs = head.unrolled(feats[:, :length], embed(toks).float(), steps)
        p, ok = [], []
        for s, h in enumerate(outs):
            prob, top = torch.softmax(head.logits(h).float(), -1).max(-1)
            p.append(prob[0])
            ok.append((top + head.d2t[top])[0] == ti[0, s : s + length, 0])
        ps.append(torch.stack(p, 1)[keep[0, :length]])
        oks.append(torch.stack(ok, 1)[keep[0, :length]])
    return torch.cat(ps).tolist(), torch.cat(oks).tolist()


def simulate(P, OK, verify, *, batch=4, overhead=0.16, head=0.06, drift=0.25, jitter=0.08, rounds=400, seed=0,
             fixed=None, gate=True, lookahead=True):
    """Tokens per round-without-a-draft's time; share of rounds without a draft; mean drafted length."""
    steps = len(P[0])
    rng = random.Random(seed)
    policy = policy_module.AdaptivePolicy(3)
    tokens = time = 0.0
    ks = []
    for r in range(rounds):
        slow = 1 + drift * math.sin(r / 40.0 + seed)
        k = fixed if fixed is not None else (policy.next() if r > 0 else 3)
        cut = policy.gate() if fixed is None and gate else None
        rows = [rng.randrange(len(P)) for _ in range(batch)]
        used = heads = 0
        if k > 0:
            cumulative = [1.0] * batch
            for j in range(min(k, steps)):
                if j > 0 and cut is not None and lookahead and \
                        sum(c * P[row][j - 1] for c, row in zip(cumulative, rows)) / batch < cut:
                    break  # (draft_loop: the next step is not run when its token would likely be cut)
                heads += 1
                cumulative = [c * P[row][j] for c, row in zip(cumulative, rows)]
                if j > 0 and cut is not None and sum(cumulative) / batch < cut:
                    break
                used = j + 1
        accepted = []
        for row in rows:
            a = 0
            while a < used and OK[row][a]:
                a += 1
            accepted.append(a)
        cost = 1.0 if used == 0 else overhead + head * heads + verify(used)
        seconds = cost * slow * rng.lognormvariate(0, jitter)
        tokens += sum(a + 1 for a in accepted) / batch
        time += seconds / slow
        ks.append(used)
        if fixed is None and r > 0:
            policy.observe(used, seconds, sum(a + 1 for a in accepted), batch,
                           [accepted.count(a) for a in range(used + 1)] if used else None)
    return tokens / time, sum(k == 0 for k in ks) / rounds, statistics.mean(ks)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--features", required=True)
    p.add_argument("--head", default=str(ROOT / "optimum_uag/models/smollm2_head"))
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--output", default=str(ROOT / "benchmarks/results/gate_simulation.json"))
    args = p.parse_args()
    results = json.loads((ROOT / "benchmarks/results/feature_head.json").read_text())
    if args.batch == 4 and "verify_cost_batch4" in results:
        curve, source = results["verify_cost_batch4"]["ms"], "verify_cost_batch4 (K + 1 tokens per row)"
        verify = lambda k: curve[str(k + 1)] / curve["1"]  # noqa: E731
    else:
        curve, source = results["verify_cost"]["ms"], "verify_cost (one row of batch x (K + 1) tokens)"
        near = lambda n: float(curve[min(curve, key=lambda c: abs(int(c) - n))])  # noqa: E731 - nearest width
        verify = lambda k: near(args.batch * (k + 1)) / near(args.batch)  # noqa: E731
    P, OK = positions(args.features, args.head)
    rows = {}
    shares = (0.4, 0.5, 0.6, 0.7, 0.8, 1.0)
    configs = [("fixed K=1", dict(fixed=1)), ("fixed K=2", dict(fixed=2)), ("adaptive, no gate", dict(gate=False))]
    configs += [(f"adaptive + gate, share {s}", dict(share=s)) for s in shares]
    default = policy_module.GATE_SHARE
    for name, kw in configs:
        policy_module.GATE_SHARE = kw.pop("share", default)
        runs = [simulate(P, OK, verify, batch=args.batch, seed=s, **kw) for s in range(args.seeds)]
        rows[name] = {"rate_vs_no_draft": round(statistics.mean(r[0] for r in runs), 4),
                      "rounds_without_draft": round(statistics.mean(r[1] for r in runs), 3),
                      "mean_draft_length": round(statistics.mean(r[2] for r in runs), 2)}
        print(f"{name:32s} {rows[name]}")
    policy_module.GATE_SHARE = default
    out = {"command": "python scripts/simulate_gate.py " + " ".join(sys.argv[1:]), "batch": args.batch,
           "positions": len(P), "agreement_per_step": [round(statistics.mean(o[s] for o in OK), 3) for s in range(3)],
           "seeds": args.seeds, "cost_model": f"overhead 0.16 + head 0.06 per step + verify from {source}, drift 25% "
           "(sine), jitter 8% (lognormal)", "default_share": default, "rows": rows}
    Path(args.output).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
