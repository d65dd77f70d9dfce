"""How a model runs on Gaudi: the runner for each model (a GaudiModelRunner, or a plain model's CPU/CUDA runner
outside HPU graphs), the runner plan the engine asks for, and upstream's per-token iteration times."""
from __future__ import annotations

import functools
import time

import torch

from ..runners import RunnerPlan
from ..runners.registry import make_runner as default_runner
from . import device as hpu
from .classes import cache_mechanism
from .runner import GaudiModelRunner


class _Bypass:
    """A graph-wrapped plain model called with `bypass_hpu_graphs=True` (habana's wrapper then runs the Python
    forward): its cache object and write slots reach the forward through attributes, which a captured graph
    would freeze. Everything else is the model's."""

    def __init__(self, model):
        self.__dict__["_model"] = model

    def __call__(self, *args, **kwargs):
        return self._model(*args, bypass_hpu_graphs=True, **kwargs)

    def __getattr__(self, name):
        return getattr(self._model, name)


class PlainModelOnGaudi:
    """A plain transformers model (no token_idx cache) on Gaudi: the CPU/CUDA runner its probe picks, run outside
    HPU graphs, with one mark_step per forward in lazy mode."""

    supports_tree = False  # its forward takes no tree mask: a feature head drafts a chain (said once)

    def __init__(self, runner, lazy_mode: bool):
        self.runner, self.lazy_mode = runner, lazy_mode
        if hpu.is_graph_wrapped(runner.model):
            runner.model = _Bypass(runner.model)

    def forward(self, tokens, start, logits_to_keep: int = 0, hidden: bool = False):
        out = self.runner.forward(tokens, start, logits_to_keep, hidden) if hidden else \
            self.runner.forward(tokens, start, logits_to_keep)
        if self.lazy_mode:
            hpu.mark_step()
        return out

    def __getattr__(self, name):
        return getattr(self.runner, name)


def make_runner(model, batch_size: int, capacity: int, pad: torch.Tensor, role: str = "target", *, options):
    """The runner for one model on Gaudi: a GaudiModelRunner where it has a token_idx cache, else the runner
    its capability probe picks (a plain transformers model), run outside HPU graphs."""
    mechanism = cache_mechanism(model)
    if mechanism == "token_idx" and role == "target":
        raise ValueError(
            f"{type(model).__name__} (optimum-habana's token_idx class) cannot be the target of assisted generation "
            "on Gaudi: its attention builds a causal mask only for a block without a past, so verifying K draft "
            "tokens takes K+1 sequential forwards and can only be slower than generate() without a draft. Use it "
            "as the assistant_model, or a target whose optimum-habana class runs on the reuse_cache path (Llama, "
            "Qwen2, Qwen3, Gemma, Mistral, Falcon: docs/gaudi.md lists every class), or run this target without "
            "assistant_model")
    if mechanism is None:
        # (no prepacked CPU kernels: the model runs on the HPU's own; runners/packed.py is a CPU path)
        return PlainModelOnGaudi(default_runner(model, batch_size, capacity, pad, role, packed=False),
                                 options.lazy_mode)
    return GaudiModelRunner(model, batch_size, capacity, pad, lazy_mode=options.lazy_mode,
                            hpu_graphs=options.hpu_graphs, use_flash_attention=options.use_flash_attention,
                            flash_attention_recompute=options.flash_attention_recompute,
                            attn_softmax_bf16=options.attn_softmax_bf16,
                            flash_attention_fast_softmax=options.flash_attention_fast_softmax,
                            bucket_size=options.bucket_size, limit_hpu_graphs=options.limit_hpu_graphs,
                            clear_hpu_graphs_cache=options.clear_hpu_graphs_cache, tight=role == "target")


def gaudi_plan(model, kwargs: dict, generation_config=None) -> RunnerPlan | None:
    """The runner plan for an optimum-habana Gaudi model (static verify width, token_idx caches); None otherwise.
    Registered with optimum_uag.runners, so the engine never imports this package."""
    from .options import pop_gaudi_options

    options = pop_gaudi_options(model, kwargs, generation_config)
    if options is None:
        return None
    rounds = None
    if options.iteration_times is not None or options.profiler is not None:
        rounds = RoundTimes(options.iteration_times, options.profiler)
    return RunnerPlan(make_runner=functools.partial(make_runner, options=options), static_verify=True,
                      ignore_eos=options.ignore_eos, rounds=rounds)


class RoundTimes:
    """upstream generate()'s `iteration_times` and `profiler`, per generated token as upstream counts them: a round
    that gave (at most, over the rows) n new tokens adds n entries of its time / n (the first round, prefill
    included, measured from the call's start, as upstream's HabanaGenerationTime: its run_generation.py reads
    iteration_times[0] as the first-token latency and the mean of the rest as the per-token latency), and steps the
    profiler n times (upstream's profiling_steps count tokens)."""

    def __init__(self, times: list | None, profiler):
        self.times, self.profiler = times, profiler
        self.last = time.perf_counter()

    def start(self) -> None:
        if self.profiler is not None:
            self.profiler.start()

    def step(self, tokens: int = 1) -> None:
        """After a round that gave (at most, over the rows) `tokens` new tokens; the first round (the prompt's) gives
        one, so iteration_times[0] is the first-token latency."""
        tokens = max(1, int(tokens))
        if self.times is not None:  # the round's host sync has happened (its token counts were read back)
            now = time.perf_counter()
            self.times.extend([(now - self.last) / tokens] * tokens)
            self.last = now
        if self.profiler is not None:
            for _ in range(tokens):
                self.profiler.step()

    def stop(self) -> None:
        if self.profiler is not None:
            self.profiler.stop()

