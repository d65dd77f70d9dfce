"""Prepacked CPU weights: the linear layers of a model run through oneDNN with their weights packed once.

On a CPU, `F.linear` repacks the weight matrix on every call, so a verify block of K+1 tokens costs about twice a
one-token forward (fp32 SmolLM2-135M here: 116 ms for 4 tokens vs 47 ms for 1) and speculative decoding cannot pay
for itself. oneDNN's prepacked linear (what inductor's `freezing` uses under torch.compile) is nearly flat in the
number of rows: 47 ms for 4 tokens, 54 ms for 9, 43 ms for 1 (docs/benchmarks.md). Packing happens once per model
(kept in the weak registry, freed with the model; repacked when a weight changes) and applies only inside
optimum-uag's own forwards: the user's model is left as it is (its modules' `forward` is swapped only for the
duration of one call). The outputs are the same computation in another summation order (fp32 rounding, as between
any two GEMM kernels); the greedy tests and every benchmark row compare tokens with the model's own generate().

Auto policy: CPU, float32 weights of plain `nn.Linear` modules of at least MIN_WEIGHTS elements (smaller ones are
faster unpacked at one row), together at most a quarter of the machine's memory. `cpu_packed_weights=False` (a
generate() argument) or OPTIMUM_UAG_PACKED_WEIGHTS=0 turns it off.
"""
from __future__ import annotations

import functools
import os

import torch

from ..registry import model_state

MIN_WEIGHTS = 1 << 18  # below this a packed linear is slower than F.linear at one row (measured: 192x576)
MEMORY_SHARE = 0.25


def supported() -> bool:
    ops = getattr(torch.ops, "mkldnn", None)
    return bool(torch.backends.mkldnn.is_available() and ops is not None and hasattr(ops, "_linear_pointwise")
                and hasattr(ops, "_reorder_linear_weight"))


def _memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def _packable(module: torch.nn.Module) -> bool:
    weight = getattr(module, "weight", None)
    return (type(module) is torch.nn.Linear and isinstance(weight, torch.Tensor) and weight.dtype == torch.float32
            and weight.device.type == "cpu" and weight.dim() == 2 and weight.numel() >= MIN_WEIGHTS
            and not torch.nn.utils.parametrize.is_parametrized(module))


def _linear(packed: torch.Tensor, bias: torch.Tensor | None, x: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


def _version(weight: torch.Tensor) -> tuple:
    """What changes when a weight is replaced or updated in place (inference tensors keep no version counter:
    their storage is what identifies them)."""
    try:
        return weight.data_ptr(), weight._version
    except RuntimeError:
        return weight.data_ptr(), None


class PackedWeights:
    """The packed copies of one model's linear weights, and a context that routes its linears through them."""

    def __init__(self, model: torch.nn.Module):
        self.modules = [m for m in model.modules() if _packable(m)]
        self.nbytes = sum(m.weight.numel() * m.weight.element_size() for m in self.modules)
        self.packed: list = [None] * len(self.modules)
        self.versions: list = [None] * len(self.modules)
        self.depth = 0

    def _refresh(self) -> None:
        with torch.no_grad():
            for i, m in enumerate(self.modules):
                version = _version(m.weight)
                if self.versions[i] != version:  # first use, or the weight changed since it was packed
                    bias = None if m.bias is None else m.bias.detach()
                    self.packed[i] = functools.partial(
                        _linear, torch.ops.mkldnn._reorder_linear_weight(m.weight.detach()), bias)
                    self.versions[i] = version

    def __enter__(self):
        if self.depth == 0:
            self._refresh()
            for m, fn in zip(self.modules, self.packed):
                m.forward = fn  # an instance attribute for this call only; removed on exit
        self.depth += 1
        return self

    def __exit__(self, *exc):
        self.depth -= 1
        if self.depth == 0:
            for m in self.modules:
                m.__dict__.pop("forward", None)
        return False


def packed_weights(model: torch.nn.Module, enabled: bool | None = None) -> PackedWeights | None:
    """The model's PackedWeights when the policy (module doc) says so; None otherwise."""
    if enabled is False or (enabled is None and os.environ.get("OPTIMUM_UAG_PACKED_WEIGHTS", "1") == "0"):
        return None
    if not supported():
        return None
    state = model_state(model)
    if state.get("packed") is not None or ("packed" in state and enabled is None):
        return state["packed"]
    pack = PackedWeights(model)
    memory = _memory_bytes()
    if not pack.modules or (enabled is None and memory and pack.nbytes > MEMORY_SHARE * memory):
        pack = None
    state["packed"] = pack
    return pack


class PackedCall:
    """A runner's `call`: the model's forward with its linears packed (the static runner calls it per block)."""

    def __init__(self, model, pack: PackedWeights):
        self.model, self.pack = model, pack

    def __call__(self, shape: tuple[int, int], **kwargs):
        with self.pack:
            return self.model(**kwargs)
