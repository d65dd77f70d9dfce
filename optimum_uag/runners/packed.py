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
faster unpacked at one row), together at most a quarter of the machine's memory, and of a shape whose packed linear
is clearly (10%) faster than F.linear on this CPU (measured once per process and shape, on weights streamed from
memory, the two kernels alternating: one row, a decode step, plus eight, a verify block). Which kernel wins is the
machine's: on the AMD EPYC of earlier sessions packing won for every shape above MIN_WEIGHTS; on an Intel Xeon
F.linear is faster for SmolLM2's 576-wide matrices at one row (streamed 576 x 576: 40 vs 61 us) and packing only for
its 49,152-row LM head (4.0 vs 6.6 ms at six rows; benchmarks/results/packing.json). `cpu_packed_weights=False` (a
generate() argument) or OPTIMUM_UAG_PACKED_WEIGHTS=0 turns it off; `packed_weights(model, enabled=True)` packs every
eligible linear without measuring, as does every rank of a multi-process (DeepSpeed) run, so that all ranks run the
same kernels.
"""
from __future__ import annotations

import functools
import os
import statistics
import time

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


_PAYS: dict = {}  # (out, in, threads) -> whether the packed linear beats F.linear on this CPU
MARGIN = 0.9  # packed only when clearly faster: a close call (or a noisy one) keeps transformers' own kernel
STREAM_BYTES = 64 << 20  # the measurement cycles through copies of the weight, this many bytes in all


@torch.inference_mode()
def packing_pays(out_features: int, in_features: int) -> bool:
    """Whether a packed (out, in) linear is clearly faster here than F.linear over one row plus eight (the two
    kernels alternate pass by pass, so a drift or a busy core slows both; medians; once per process, shape and
    thread count: ~0.3 s a shape).

    Each timed pass runs the kernel over enough copies of the weight (STREAM_BYTES in all) that the weights come
    from memory, as in a forward, where every layer's weights are read once. Timed on one weight, repeated, the
    weight sits in the core's cache, and the two kernels rank differently: on an Intel Xeon the packed 576 x 576
    projection measured 33.9 / 41.0 us against F.linear's 41.0 / 47.9 us at 6 / 9 rows from cache, a close call
    over 1 + 8 rows that noise could tip, but a SmolLM2 forward with it packed ran 1.16x slower at one token and no
    faster at 6-17 (benchmarks/results/packing.json)."""
    key = (out_features, in_features, torch.get_num_threads())
    if key not in _PAYS:
        gen = torch.Generator().manual_seed(0)
        copies = max(1, min(64, STREAM_BYTES // (4 * out_features * in_features)))
        weight = torch.randn(out_features, in_features, generator=gen)
        weights = [weight] + [weight.clone() for _ in range(copies - 1)]  # distinct memory, the same values
        packed = [torch.ops.mkldnn._reorder_linear_weight(w) for w in weights]
        passes = max(3, min(9, int(1e8 // (copies * out_features * in_features))))
        kernels = {"plain": lambda v: [torch.nn.functional.linear(v, w) for w in weights],
                   "packed": lambda v: [_linear(p, None, v) for p in packed]}
        total = {"plain": 0.0, "packed": 0.0}
        for rows in (1, 8):
            x = torch.randn(1, rows, in_features, generator=gen)
            times = {name: [] for name in kernels}
            for rep in range(passes + 1):
                for name, fn in kernels.items():
                    t0 = time.perf_counter()
                    fn(x)
                    if rep:  # the first pass of each is a warm-up
                        times[name].append(time.perf_counter() - t0)
            for name in kernels:
                total[name] += statistics.median(times[name])
        _PAYS[key] = total["packed"] < MARGIN * total["plain"]
    return _PAYS[key]


def _several_processes() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized() and \
        torch.distributed.get_world_size() > 1


def _version(weight: torch.Tensor) -> tuple:
    """What changes when a weight is replaced or updated in place (inference tensors keep no version counter:
    their storage is what identifies them)."""
    try:
        return weight.data_ptr(), weight._version
    except RuntimeError:
        return weight.data_ptr(), None


class PackedWeights:
    """The packed copies of one model's linear weights, and a context that routes its linears through them."""

    def __init__(self, model: torch.nn.Module, measured: bool = False, select=None):
        """measured: only the shapes `packing_pays` chooses; select(out, in) -> bool: only those (benchmarks)."""
        self.modules = [m for m in model.modules() if _packable(m) and (select is None or select(*m.weight.shape))
                        and (not measured or packing_pays(*m.weight.shape))]
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
    # the measured choice, or every eligible linear; ranks of a multi-process run each measure for themselves and
    # could choose different kernels (different rounding in replicated layers): there every eligible linear, the same
    # on every rank
    measured = enabled is None and not _several_processes()
    key = "packed" if measured else "packed_all"
    if key in state:
        return state[key]
    pack = PackedWeights(model, measured=measured)
    memory = _memory_bytes()
    if not pack.modules or (enabled is None and memory and pack.nbytes > MEMORY_SHARE * memory):
        pack = None
    state[key] = pack
    return pack


class PackedCall:
    """A runner's `call`: the model's forward with its linears packed (the static runner calls it per block)."""

    def __init__(self, model, pack: PackedWeights):
        self.model, self.pack = model, pack

    def __call__(self, shape: tuple[int, int], **kwargs):
        with self.pack:
            return self.model(**kwargs)
