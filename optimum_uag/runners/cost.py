"""The target's verify cost curve on this device: one forward of W tokens against one of 1 token, on the runner
optimum-uag verifies with (what decides how many draft tokens, or tree nodes, one round can afford)."""
from __future__ import annotations

import statistics
import time

import torch


@torch.no_grad()
def forward_seconds(model, batch: int, width: int, context: int = 200, reps: int = 8) -> float:
    """Median seconds of one `width`-token forward at `context` tokens of cache, on the runner the engine uses."""
    from .registry import make_runner

    runner = make_runner(model, batch, context + width + 8, torch.zeros(batch, dtype=torch.long, device=model.device))
    vocab = int(getattr(model.config, "vocab_size", 0) or 32)
    gen = torch.Generator().manual_seed(0)
    ids = lambda n: torch.randint(0, vocab, (batch, n), generator=gen).to(model.device)  # noqa: E731
    runner.forward(ids(context), torch.zeros(batch, dtype=torch.long, device=model.device))
    start = torch.full((batch,), context, dtype=torch.long, device=model.device)
    times = []
    for _ in range(reps + 2):
        tokens = ids(width)
        t0 = time.perf_counter()
        runner.forward(tokens, start, logits_to_keep=width).cpu()
        times.append(time.perf_counter() - t0)
    return statistics.median(times[2:])


def verify_cost(model, widths=(1, 2, 4, 8, 16, 32), batch: int = 1, context: int = 200, reps: int = 6) -> dict:
    """{'ms': {W: milliseconds}, 'relative': {W: cost of W tokens / cost of 1}} measured here."""
    ms = {int(w): forward_seconds(model, batch, int(w), context, reps) * 1e3 for w in sorted({1, *widths})}
    return {"ms": {w: round(v, 3) for w, v in ms.items()},
            "relative": {w: round(v / ms[1], 3) for w, v in ms.items()}, "batch": batch, "context": context}
