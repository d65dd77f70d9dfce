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


CURVE_CONTEXT = 64  # cached tokens under the forwards of `relative_curve` (the curve's shape, not its level, decides)
CURVE_REPS = 5


@torch.no_grad()
def relative_curve(model, batch: int, widths, make=None) -> dict:
    """{W: seconds of a W-token forward / seconds of a 1-token one}, measured on the runner factory `make` (the
    call's own; default registry.make_runner), the widths interleaved, 2 + CURVE_REPS forwards of each after a
    CURVE_CONTEXT-token prefill; once per process, model, dtype, batch, widths, thread count and factory (kept in
    the model's state, dropped with the model). A measurement that failed raises its error again without running."""
    from ..registry import model_state

    widths = tuple(sorted({1, *(int(w) for w in widths)}))
    key = ("verify_curve", batch, widths, torch.get_num_threads(), model.dtype,
           getattr(make, "keywords", None) and tuple(sorted(make.keywords.items())))
    state = model_state(model)
    if key not in state:
        try:
            seconds = _interleaved_seconds(model, batch, widths, CURVE_CONTEXT, CURVE_REPS, make)
        except Exception as err:  # (not measured again at every call: each would pay the prefill and fail alike)
            state[key] = err
            raise
        state[key] = {w: seconds[w] / seconds[1] for w in widths}
    if isinstance(state[key], Exception):
        raise state[key]
    return state[key]
