"""The target's verify cost curve on this device: one forward of W tokens against one of 1 token, on the runner
optimum-uag verifies with (what decides how many draft tokens, or tree nodes, one round can afford)."""
from __future__ import annotations

import statistics
import time

import torch


@torch.no_grad()
def forward_seconds(model, batch: int, width: int, context: int = 200, reps: int = 8) -> float:
    """Median seconds of one `width`-token forward at `context` tokens of cache, on the runner the engine uses."""
    return _interleaved_seconds(model, batch, [width], context, reps)[width]


@torch.no_grad()
def _interleaved_seconds(model, batch: int, widths, context: int, reps: int) -> dict:
    """Median seconds of a forward of each width, the widths taken in turn within every repetition (this CPU drifts
    25-35% within a run: measured one width after another, a slow spell lands on whichever width it meets, and the
    curve came out non-monotonic, a 3-token verify at batch 4 costlier than a 4-token one)."""
    from .registry import make_runner

    widths = sorted(set(int(w) for w in widths))
    runner = make_runner(model, batch, context + max(widths) + 8,
                         torch.zeros(batch, dtype=torch.long, device=model.device))
    vocab = int(getattr(model.config, "vocab_size", 0) or 32)
    gen = torch.Generator().manual_seed(0)
    ids = lambda n: torch.randint(0, vocab, (batch, n), generator=gen).to(model.device)  # noqa: E731
    runner.forward(ids(context), torch.zeros(batch, dtype=torch.long, device=model.device))
    start = torch.full((batch,), context, dtype=torch.long, device=model.device)
    times: dict = {w: [] for w in widths}
    for rep in range(reps + 2):
        for w in widths:
            tokens = ids(w)
            t0 = time.perf_counter()
            runner.forward(tokens, start, logits_to_keep=w).cpu()
            if rep >= 2:  # (the first two: warm-up, each shape's first kernels)
                times[w].append(time.perf_counter() - t0)
    return {w: statistics.median(t) for w, t in times.items()}


def verify_cost(model, widths=(1, 2, 4, 8, 16, 32), batch: int = 1, context: int = 200, reps: int = 6) -> dict:
    """{'ms': {W: milliseconds}, 'relative': {W: cost of W tokens / cost of 1}} measured here, the widths
    interleaved."""
    seconds = _interleaved_seconds(model, batch, {1, *widths}, context, reps)
    ms = {w: v * 1e3 for w, v in seconds.items()}
    return {"ms": {w: round(v, 3) for w, v in ms.items()},
            "relative": {w: round(v / ms[1], 3) for w, v in ms.items()}, "batch": batch, "context": context}


DEVICE_TREE_CONTEXT = 64  # cached tokens under the measured forwards (the curve's shape, not its level, decides)


@torch.no_grad()
def tree_for_device(model, batch: int, candidates, head_cost: float):
    """The candidate tree (engine/config.py DEVICE_TREES: (shape, tau, head steps)) with the best expected rate on
    this machine, tau / (cost of a (nodes + 1)-token forward + head steps x head_cost), the verify costs measured
    here (the widths interleaved, once per process, model, batch and thread count: ~16 forwards, 0.8 s for SmolLM2
    on 2 cores). Set OPTIMUM_UAG_DEVICE_TREE=0 to keep the first candidate (the fixed default)."""
    import os

    from ..registry import model_state

    if os.environ.get("OPTIMUM_UAG_DEVICE_TREE", "1") == "0" or len(candidates) == 1:
        return candidates[0][0]
    widths = sorted({1, *(shape.nodes + 1 for shape, _, _ in candidates)})
    key = ("verify_curve", batch, tuple(widths), torch.get_num_threads())
    state = model_state(model)
    if key not in state:
        seconds = _interleaved_seconds(model, batch, widths, DEVICE_TREE_CONTEXT, 3)
        state[key] = {w: seconds[w] / seconds[1] for w in widths}
    curve = state[key]
    return max(candidates, key=lambda c: c[1] / (curve[c[0].nodes + 1] + c[2] * head_cost))[0]
