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
def _interleaved_seconds(model, batch: int, widths, context: int, reps: int, make=None) -> dict:
    """Median seconds of a forward of each width, the widths taken in turn within every repetition (this CPU drifts
    25-35% within a run: measured one width after another, a slow spell lands on whichever width it meets, and the
    curve came out non-monotonic, a 3-token verify at batch 4 costlier than a 4-token one). `make`: the runner
    factory (default: registry.make_runner, the auto packing policy)."""
    from .registry import make_runner

    widths = sorted(set(int(w) for w in widths))
    runner = (make or make_runner)(model, batch, context + max(widths) + 8,
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
DEVICE_TREE_REPS = 5
DEVICE_TREE_MARGIN = 1.05  # another candidate replaces the first only when its expected rate is this much higher
# above this many weights per token the measurement is skipped (the first candidate kept): its ~20 forwards would cost
# a large model on a CPU seconds to minutes, and a forward that streams that many weights is memory-bound, so its
# cost curve is flat across a few tokens (the first candidate's case)
DEVICE_TREE_MAX_WEIGHTS = 1_000_000_000


@torch.no_grad()
def tree_for_device(model, batch: int, candidates, head_cost: float, make=None):
    """The candidate tree (engine/config.py DEVICE_TREES: (shape, tau, head steps), the first the default) with the
    best expected rate on this machine, tau / (cost of a (nodes + 1)-token forward + head steps x head_cost), the
    verify costs measured here on the call's own runner factory `make` (the widths interleaved; once per process,
    model, dtype, batch, thread count and factory: 2 + DEVICE_TREE_REPS forwards of each width after a 64-token
    prefill). Another candidate replaces the first only when it is DEVICE_TREE_MARGIN ahead (two within noise of each
    other keep the default, the same in every process). The first is kept without measuring with
    OPTIMUM_UAG_DEVICE_TREE=0, above DEVICE_TREE_MAX_WEIGHTS weights per token, or when the measurement fails in a
    single-process run (a warning says so; ranks of a multi-process run raise alike)."""
    import os
    import warnings

    from ..engine.policy import weights_per_token
    from ..registry import model_state

    first = candidates[0][0]
    if (os.environ.get("OPTIMUM_UAG_DEVICE_TREE", "1") == "0" or len(candidates) == 1
            or weights_per_token(model) > DEVICE_TREE_MAX_WEIGHTS):
        return first
    widths = sorted({1, *(shape.nodes + 1 for shape, _, _ in candidates)})
    key = ("verify_curve", batch, tuple(widths), torch.get_num_threads(), model.dtype,
           getattr(make, "keywords", None) and tuple(sorted(make.keywords.items())))
    state = model_state(model)
    if key not in state:
        try:
            seconds = _interleaved_seconds(model, batch, widths, DEVICE_TREE_CONTEXT, DEVICE_TREE_REPS, make)
        except Exception as err:  # (a model too short for the measurement's context, memory)
            if torch.distributed.is_available() and torch.distributed.is_initialized():
                raise
            warnings.warn(f"optimum-uag: could not measure this device's verify cost ({type(err).__name__}: {err}); "
                          f"drafting the default tree {(first.depth, first.top_k, first.nodes)}", stacklevel=4)
            state[key] = None
        else:
            state[key] = {w: seconds[w] / seconds[1] for w in widths}
    curve = state[key]
    if curve is None:
        return first
    rate = {shape: tau / (curve[shape.nodes + 1] + steps * head_cost) for shape, tau, steps in candidates}
    best = max(rate, key=rate.get)
    return best if rate[best] > DEVICE_TREE_MARGIN * rate[first] else first
