"""`torch_compile=True`: the static-shape steps of both models run through torch.compile.

Per device, what the fastest stable configuration is (and what optimum-habana / transformers use):
  cpu   inductor, mode "max-autotune" with `torch._inductor.config.freezing` (weights folded as constants): inductor
        picks its C++ micro-GEMM, which beats MKL's GEMM for the few-row (1..K+1 tokens) products of decoding
  cuda  inductor, mode "reduce-overhead" (CUDA graphs), as transformers' CompileConfig default
  hpu   backend "hpu_backend" with keep_input_mutations, as optimum-habana's run_generation.py
Only decode-shaped calls (at most `max_tokens` new tokens) are compiled; the prompt's prefill runs eagerly, so the
number of graphs is bounded by the verify width and the draft's 1- and 2-token steps, whatever the prompt lengths.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from ..registry import model_state


@dataclass
class CompileOptions:
    """How to compile: torch.compile's backend/mode/options, and the largest block (tokens) that uses the graph."""

    backend: str = "inductor"
    mode: str | None = None
    options: dict | None = None
    max_tokens: int = 16
    freezing: bool = False
    dynamic: bool = False

    @classmethod
    def for_device(cls, device: torch.device, user=True) -> "CompileOptions":
        """Defaults for the device; `user` may be True, a mode string, or a dict of CompileOptions fields."""
        if isinstance(user, CompileOptions):
            return user
        if device.type == "hpu":
            opts = cls(backend="hpu_backend", options={"keep_input_mutations": True})
        elif device.type == "cuda":
            opts = cls(mode="reduce-overhead")
        else:
            opts = cls(mode="max-autotune", freezing=True)
        if isinstance(user, str):
            opts.mode = user
        elif isinstance(user, dict):
            unknown = set(user) - set(cls.__dataclass_fields__)
            if unknown:
                raise ValueError(f"torch_compile: unknown option(s) {sorted(unknown)}; use {sorted(cls.__dataclass_fields__)}")
            for key, value in user.items():
                setattr(opts, key, value)
        elif user is not True:
            raise TypeError("torch_compile must be True, a torch.compile mode string, or a dict of options")
        return opts

    def compile_kwargs(self) -> dict:
        """torch.compile's arguments. `freezing` travels in `options` (inductor reads it per compilation), so no
        process-wide inductor switch stays on; a mode is then spelled as its options (compile takes one or the other)."""
        kwargs = dict(backend=self.backend, dynamic=self.dynamic, fullgraph=False)
        options = dict(self.options or {})
        mode = self.mode
        if self.freezing and self.backend == "inductor":
            options["freezing"] = True
            if mode == "max-autotune":
                options["max_autotune"] = True
            elif mode == "reduce-overhead":
                options["triton.cudagraphs"] = True
            mode = None
        if mode:
            kwargs["mode"] = mode
        if options:
            kwargs["options"] = options
        return kwargs

    def key(self) -> tuple:
        return (self.backend, self.mode, tuple(sorted((self.options or {}).items())), self.freezing, self.dynamic)


@dataclass
class CompileStats:
    """What compilation cost: seconds spent in calls that compiled a new graph, and how many there were."""

    graphs: int = 0
    seconds: float = 0.0
    shapes: set = field(default_factory=set)


def compiled_forward(model, opts: CompileOptions):
    """model.forward compiled with `opts`, cached on the model so that later generate calls reuse its graphs."""
    cache = model_state(model).setdefault("compiled", {})
    key = opts.key()
    if key not in cache:
        cache[key] = (torch.compile(model.forward, **opts.compile_kwargs()), CompileStats())
    return cache[key]


class CompiledCall:
    """Calls the compiled forward for decode-shaped blocks and the eager one otherwise; times first calls per shape."""

    static_shapes = True  # the static runner keeps its whole cache width (one compiled shape per block width)

    def __init__(self, model, opts: CompileOptions):
        self.model, self.opts = model, opts
        self.fn, self.stats = compiled_forward(model, opts)

    def __call__(self, shape: tuple[int, int], **kwargs):
        if shape[1] > self.opts.max_tokens:
            return self.model(**kwargs)
        if shape in self.stats.shapes:
            return self.fn(**kwargs)
        t0 = time.perf_counter()
        out = self.fn(**kwargs)
        self.stats.seconds += time.perf_counter() - t0
        self.stats.graphs += 1
        self.stats.shapes.add(shape)
        return out


def compiling_factory(base_factory, opts: CompileOptions):
    """Wrap a runner factory so that each runner it makes calls its model through a CompiledCall (static runners)."""

    def make(model, batch_size, capacity, pad, role="target"):
        runner = base_factory(model, batch_size, capacity, pad, role=role)
        if hasattr(runner, "call"):
            runner.call = CompiledCall(model, opts)
        else:
            import warnings

            warnings.warn(f"torch_compile: the {role} runs on the '{getattr(runner, 'kind', '?')}' runner, whose cache "
                          "changes shape every step; it runs eagerly", stacklevel=3)
        return runner

    return make


def compile_stats(model) -> dict:
    """{graphs, seconds} summed over the compiled forwards cached on this model."""
    stats = [s for _, s in model_state(model).get("compiled", {}).values()]
    return {"graphs": sum(s.graphs for s in stats), "seconds": sum(s.seconds for s in stats)}


def transformers_compile_config(device: torch.device, user=True):
    """The same compilation for transformers' own generate() (target-only baselines): a CompileConfig for a static
    cache, valid on every device (transformers auto-compiles only on CUDA unless told otherwise)."""
    from transformers import CompileConfig

    kwargs = CompileOptions.for_device(device, user).compile_kwargs()
    config = CompileConfig(fullgraph=False, dynamic=kwargs["dynamic"], backend=kwargs["backend"],
                           mode=kwargs.get("mode"), options=kwargs.get("options"))
    config._compile_all_devices = True
    return config
