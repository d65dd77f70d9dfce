"""Timed runs side by side: warm-up, device sync, new-token counting (generate, tune and the benchmarks)."""
from __future__ import annotations

import copy
import sys
import time
from dataclasses import dataclass, field
from typing import Callable


def device_sync(device):
    """What waits for the device's queued work: torch.hpu.synchronize on Gaudi (lazy mode queues the graphs),
    torch.cuda.synchronize on CUDA, nothing on the CPU."""
    import torch

    if device.type == "hpu":
        from ..gaudi import device as hpu

        return hpu.synchronize
    if device.type == "cuda":
        return torch.cuda.synchronize
    return lambda: None


def timed(fn, sync):
    """Seconds of fn() up to its output on the host (as optimum-habana times generate(...).cpu())."""
    sync()
    t0 = time.perf_counter()
    out = fn()
    (out.sequences if hasattr(out, "sequences") else out).cpu()
    sync()
    return out, time.perf_counter() - t0


def count_new(sequences, prompt_len: int, eos_ids) -> int:
    """Tokens actually generated: up to and including each row's EOS (not batch * max_new_tokens)."""
    new = sequences[:, prompt_len:].tolist()
    total = 0
    for row in new:
        n = len(row)
        for i, t in enumerate(row):
            if t in eos_ids:
                n = i + 1
                break
        total += n
    return total


@dataclass
class Method:
    """One row of a side-by-side run: fn(encoded batch) -> sequences or an AssistedGenerateOutput."""

    fn: Callable
    engine: bool = False  # optimum-uag: its metrics are collected
    baseline_of: str | None = None  # transformers' assisted generation on the same pair as this row
    # a comparison row that may fail inside another library (transformers' own assisted generation): its failure
    # leaves the row out with a note naming it, instead of ending the run; this says what the row is
    optional: str | None = None


@dataclass
class RowResult:
    seconds: float = 0.0
    tokens: int = 0
    warmup_seconds: float = 0.0
    metrics: object = None  # optimum-uag's Metrics, merged over every call
    captures: dict = field(default_factory=dict)  # HPU graphs captured per model (emulator), warmup included
    per_iteration: dict = field(default_factory=dict)  # iteration -> [accepted, drafted]
    mismatched: list = field(default_factory=list)  # (iteration, batch) where greedy output != target-only
    # greedy vs target-only, row by row (up to each row's first EOS): rows compared / differing, new tokens
    # compared / after the first divergence (bf16 can flip near-ties: exactness is claimed for fp32)
    divergence: dict = field(default_factory=lambda: dict(rows=0, rows_differing=0, tokens=0, tokens_after=0))
    last: object = None

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


def _call(method: Method, enc, sync, emulator, row: RowResult):
    before = dict(emulator.captures) if emulator is not None else {}
    out, seconds = timed(lambda: method.fn(enc), sync)
    for model_name, n in (emulator.captures.items() if emulator is not None else ()):
        if model_name in ("target", "assistant") and n > before.get(model_name, 0):
            row.captures[model_name] = row.captures.get(model_name, 0) + n - before.get(model_name, 0)
    return out, seconds


def _drop_failed(methods: dict, rows: dict, name: str, err: Exception, notes) -> None:
    """An optional row failed: left out of the run, with one line on stderr and in the notes (never silently)."""
    first = str(err).strip().splitlines()[-1][:200] if str(err).strip() else ""
    line = (f"{methods[name].optional} failed on this run ({type(err).__name__}: {first}); its row is left out "
            "(optimum-uag's rows are unaffected)")
    print(line, file=sys.stderr)
    if notes is not None:
        notes.append(line)
    del methods[name], rows[name]


def run_side_by_side(methods: dict, encoded: list, warmup: int, iterations: int, seed: int, sync, eos_ids,
                     emulator=None, greedy: bool = True, notes: list | None = None) -> dict:
    """Every method on every batch, in turn on the same inputs and seed (like with like, one process). Untimed
    first: `warmup` passes over the first batch and one over every other batch shape (captures, compilation).
    An `optional` method that raises is dropped (see _drop_failed); any other failure ends the run."""
    import torch
    from tqdm.auto import tqdm

    from .. import distributed

    methods = dict(methods)
    rows = {name: RowResult() for name in methods}
    shapes, warm = {tuple(encoded[0]["input_ids"].shape)}, [encoded[0]] * warmup
    for enc in encoded[1:]:
        if warmup and tuple(enc["input_ids"].shape) not in shapes:
            shapes.add(tuple(enc["input_ids"].shape))
            warm.append(enc)
    for enc in warm:
        for name, method in list(methods.items()):
            torch.manual_seed(seed)
            try:
                rows[name].warmup_seconds += _call(method, enc, sync, emulator, rows[name])[1]
            except Exception as err:
                if method.optional is None:
                    raise
                _drop_failed(methods, rows, name, err, notes)
    steps = [(it, b) for it in range(iterations) for b in range(len(encoded))]
    for it, b in tqdm(steps, desc="generate", disable=not sys.stderr.isatty() or distributed.rank() != 0):
        enc = encoded[b]
        prompt_len = enc["input_ids"].shape[1]
        for name, method in list(methods.items()):
            torch.manual_seed(seed + it)
            try:
                out, seconds = _call(method, enc, sync, emulator, rows[name])
            except Exception as err:
                if method.optional is None:
                    raise
                _drop_failed(methods, rows, name, err, notes)
                continue
            row = rows[name]
            row.last = out.sequences if hasattr(out, "sequences") else out
            row.seconds += seconds
            row.tokens += count_new(row.last, prompt_len, eos_ids)
            if method.engine:
                m = out.metrics
                acc = row.per_iteration.setdefault(it, [0, 0])
                acc[0] += m.accepted_tokens
                acc[1] += m.draft_tokens
                row.metrics = copy.deepcopy(m) if row.metrics is None else row.metrics.merge(m)
        for name, method in methods.items():
            if name != "target_only" and greedy:  # every row, the prepacked and transformers' rows included
                if not torch.equal(rows[name].last, rows["target_only"].last):
                    rows[name].mismatched.append([it, b])
                count_divergence(rows[name].divergence, rows[name].last, rows["target_only"].last, prompt_len,
                                 eos_ids)
    return rows


def count_divergence(acc: dict, ours, reference, prompt_len: int, eos_ids) -> None:
    """Add to `acc` the rows compared / differing and the reference's new tokens / those after the first
    difference, each row cut after its first EOS (a static-shape loop keeps writing after it)."""
    eos = set(eos_ids or ())

    def cut(row):
        row = row[prompt_len:].tolist()
        ends = [i for i, t in enumerate(row) if t in eos]
        return row[: ends[0] + 1] if ends else row

    for a, b in zip(ours, reference):
        a, b = cut(a), cut(b)
        at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
        if at is None and len(a) != len(b):
            at = min(len(a), len(b))
        acc["rows"] += 1
        acc["tokens"] += len(b)
        if at is not None:
            acc["rows_differing"] += 1
            acc["tokens_after"] += len(b) - at
