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

Verify blocks (MIN_ROWS to MAX_ROWS rows, runners/skinny.py) run on the skinny kernel instead, for the shapes where it
measures faster here than the kernel above (`skinny_pays`, the same alternating measurement at 4 and 8 rows): MKL
switches from its weight-streaming kernel to a blocked GEMM at 4 rows, which made a forward of 4 tokens cost 1.34 of
a one-token forward on an Intel Xeon (1.07 with the skinny kernel; docs/benchmarks.md). Steps and verifies of 1-3
rows run on it too where it measures no slower there (`skinny_pays(..., few=True)`): with two weight streams a core it
reads memory faster than MKL's sgemv on that Xeon, and a linear then streams one copy of its weights, not two (such a
linear keeps no oneDNN copy: only a prefill runs another kernel, F.linear). OPTIMUM_UAG_SKINNY=0 keeps the kernels
above for every block.
"""
from __future__ import annotations

import functools
import os
import statistics
import time
import weakref

import torch

from ..registry import model_state
from . import skinny

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


def _alternating_seconds(kernels: dict, row_counts, in_features: int, passes: int, gen) -> dict:
    """{name: the sum over row_counts of the median seconds of one pass of that kernel}, the kernels alternating
    pass by pass (a drift or a busy core slows them alike); the first pass of each is a warm-up."""
    total = {name: 0.0 for name in kernels}
    for rows in row_counts:
        x = torch.randn(1, rows, in_features, generator=gen)
        times = {name: [] for name in kernels}
        for rep in range(passes + 1):
            for name, fn in kernels.items():
                t0 = time.perf_counter()
                fn(x)
                if rep:
                    times[name].append(time.perf_counter() - t0)
        for name in kernels:
            total[name] += statistics.median(times[name])
    return total


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
        total = _alternating_seconds(kernels, (1, 8), in_features, passes, gen)
        _PAYS[key] = total["packed"] < MARGIN * total["plain"]
    return _PAYS[key]


SKINNY_MIN_WEIGHTS = 1 << 16  # below this a call's overhead is most of its time (and tiny test models keep MKL's)


def _skinny_eligible(module: torch.nn.Module) -> bool:
    return skinny.eligible(module) and module.weight.numel() >= SKINNY_MIN_WEIGHTS


_SKINNY_PAYS: dict = {}  # (out, in, threads, oneDNN-packed, few) -> whether the skinny kernel beats that one
FEW_MARGIN = 1.0  # 1-3 rows: the skinny kernel unless it measures slower (one copy of the weights streamed, not two)


@torch.inference_mode()
def skinny_pays(out_features: int, in_features: int, packed: bool, few: bool = False) -> bool:
    """Whether the skinny kernel is faster here than the kernel a linear of this shape runs otherwise (oneDNN's
    packed one when `packed`, else F.linear): over a block of 4 rows plus one of 8 by MARGIN, or with `few` over 1 row
    plus 3 (a decode step, a small verify) by FEW_MARGIN. The weights streamed from memory as in a forward, the
    kernels alternating pass by pass (as `packing_pays`; once per process, shape and question).

    Where a linear runs the kernel for blocks but not for few rows, a forward of a step reads its weights and one of a
    block reads the kernel's copy: two copies share the cache. So for few rows a tie goes to the kernel."""
    key = (out_features, in_features, torch.get_num_threads(), packed, few)
    if key not in _SKINNY_PAYS:
        gen = torch.Generator().manual_seed(0)
        copies = max(1, min(64, STREAM_BYTES // (4 * out_features * in_features)))
        weight = torch.randn(out_features, in_features, generator=gen)
        weights = [weight] + [weight.clone() for _ in range(copies - 1)]
        skinnies = [skinny.SkinnyWeight(w) for w in weights]
        if packed:
            packs = [torch.ops.mkldnn._reorder_linear_weight(w) for w in weights]
            other = lambda v: [_linear(p, None, v) for p in packs]  # noqa: E731
        else:
            other = lambda v: [torch.nn.functional.linear(v, w) for w in weights]  # noqa: E731
        kernels = {"other": other, "skinny": lambda v: [s(v) for s in skinnies]}
        passes = max(5, min(9, int(1e8 // (copies * out_features * in_features))))
        rows = (1, skinny.MIN_ROWS - 1) if few else (skinny.MIN_ROWS, 8)
        total = _alternating_seconds(kernels, rows, in_features, passes, gen)
        _SKINNY_PAYS[key] = (total["skinny"] <= FEW_MARGIN * total["other"] if few
                             else total["skinny"] < MARGIN * total["other"])
    return _SKINNY_PAYS[key]


def _plain(module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.linear(x, module.weight, module.bias)


def _route(small, block, few, x: torch.Tensor) -> torch.Tensor:
    """One linear call: a block of skinny.MIN_ROWS..MAX_ROWS rows on `block` (the skinny kernel, which hands an
    input it does not take, another dtype or autograd, back to `small`), fewer rows on `few`, more on `small`."""
    width = x.shape[-1]
    rows = x.numel() // width if width else 0
    if rows < skinny.MIN_ROWS:
        return few(x)
    return block(x) if rows <= skinny.MAX_ROWS else small(x)


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

    def __init__(self, model: torch.nn.Module, measured: bool = False, select=None, use_skinny: bool | None = None,
                 few: bool = True, bf16: bool = False):
        """measured: only the shapes `packing_pays` (oneDNN) and `skinny_pays` (blocks of rows, few rows) choose;
        select(out, in) -> bool: only those (benchmarks); use_skinny: False never, True wherever eligible, None as
        measured; few=False: the skinny kernel for blocks only (benchmarks); bf16: a draft's pack (`packed_weights`),
        every eligible linear on the skinny kernel with its weights in bfloat16 for 1-64 rows (half the bytes of the
        float32 kernels the measurement compares: not measured), F.linear above."""
        self.bf16 = bf16
        if bf16:
            measured, use_skinny, few = False, True, True
        chosen = [m for m in model.modules() if isinstance(getattr(m, "weight", None), torch.Tensor)
                  and m.weight.dim() == 2 and (select is None or select(*m.weight.shape))]
        self.onednn = {m for m in chosen if supported() and _packable(m) and not bf16
                       and (not measured or packing_pays(*m.weight.shape))}
        self.skinny: set = set()  # blocks of skinny.MIN_ROWS..MAX_ROWS rows on the skinny kernel
        self.skinny_few: set = set()  # and of fewer rows (a decode step, a small verify)
        candidates = [m for m in chosen if _skinny_eligible(m)] if use_skinny is not False else []
        if candidates and skinny.available():  # (built, or warned about, only where a linear could use it)
            # unmeasured, 1-3 rows go to the kernel only where it runs on torch's threads: a single-threaded build
            # (torch on another OpenMP runtime) against a multi-threaded MKL step is measured, never assumed
            if not few:
                pass
            elif use_skinny or not measured:
                if skinny.library().threaded or torch.get_num_threads() == 1:
                    self.skinny_few = set(candidates)
            else:
                self.skinny_few = {m for m in candidates if skinny_pays(*m.weight.shape, m in self.onednn, few=True)}
            # blocks: where it measures faster there, and wherever it runs the steps (no slower at 1-3 rows, where
            # MKL streams the weights, it is no slower at 4-64, where MKL packs them; and one copy stays streamed)
            self.skinny = {m for m in candidates if m in self.skinny_few or use_skinny or not measured
                           or skinny_pays(*m.weight.shape, m in self.onednn)}
            self.onednn -= self.skinny_few  # (left a prefill only, which F.linear's blocked GEMM serves as well)
        self.modules = [m for m in chosen if m in self.onednn or m in self.skinny]
        self.nbytes = sum(m.weight.numel() * m.weight.element_size() * ((m in self.onednn) + (m in self.skinny)
                                                                         / (2 if bf16 else 1)) for m in self.modules)
        # per module, its forward (None: its own) for: more rows than a block and whatever the kernel does not take
        self.small: list = [None] * len(self.modules)
        self.few: list = [None] * len(self.modules)  # 1..MIN_ROWS-1 rows
        self.direct: list = [None] * len(self.modules)  # a block, inside a runner's forward (no routing)
        self.blocks: list = [None] * len(self.modules)  # any number of rows (routed per call)
        self.versions: list = [None] * len(self.modules)
        self.depth = 0
        self._model = weakref.ref(model)
        self._hook = None

    def _refresh(self) -> None:
        with torch.no_grad():
            for i, m in enumerate(self.modules):
                version = _version(m.weight), None if m.bias is None else _version(m.bias)
                if self.versions[i] != version:  # first use, or the weight changed since it was packed
                    bias = None if m.bias is None else m.bias.detach()
                    small = None
                    if m in self.onednn:
                        small = functools.partial(_linear, torch.ops.mkldnn._reorder_linear_weight(m.weight.detach()),
                                                  bias)
                    block = direct = few = small
                    if m in self.skinny:
                        fallback = small or functools.partial(_plain, m)
                        direct = skinny.SkinnyWeight(m.weight, bias, fallback=fallback, bf16=self.bf16)
                        if m in self.skinny_few:
                            few = direct
                        block = functools.partial(_route, fallback, direct, few or fallback)
                    self.small[i], self.few[i], self.blocks[i], self.direct[i] = small, few, block, direct
                    self.versions[i] = version

    def enter(self, rows: int | None = None) -> "PackedWeights":
        """Route the linears through the packed weights until `exit()`. `rows`: a runner's forward (no autograd) of
        that many rows (batch x tokens): a block of skinny.MIN_ROWS..MAX_ROWS rows runs every skinny-chosen linear on
        the skinny kernel, fewer rows those chosen for few rows (`skinny_few`), a prefill none. None (transformers'
        generate(), any caller): each forward of the model chooses by its input's rows (a pre-hook), and a forward
        under autograd routes each call by its own rows. (A per-call routing wrapper costs ~3 us a linear, 0.6 ms a
        SmolLM2 forward: only where needed.)"""
        if self.depth == 0:
            self._refresh()
            self._install(rows)
            model = self._model()
            if rows is None and self.skinny and model is not None:
                self._hook = model.register_forward_pre_hook(self._pre_hook, with_kwargs=True)
        self.depth += 1
        return self

    def _install(self, rows: int | None) -> None:
        if rows is None or torch.is_grad_enabled():
            fns = self.blocks
        else:
            fns = self.few if rows < skinny.MIN_ROWS else self.direct if rows <= skinny.MAX_ROWS else self.small
        for m, fn in zip(self.modules, fns):
            # an instance attribute for this call only, removed on exit (set in __dict__ directly: nn.Module's
            # __setattr__ costs ~5 us a module, 1 ms a SmolLM2 forward)
            if fn is None:
                m.__dict__.pop("forward", None)
            else:
                m.__dict__["forward"] = fn

    def _pre_hook(self, module, args, kwargs):
        x = kwargs.get("input_ids")
        if x is None:
            x = kwargs.get("inputs_embeds")
        if x is None and args and isinstance(args[0], torch.Tensor):
            x = args[0]
        self._install(x.shape[0] * x.shape[1] if isinstance(x, torch.Tensor) and x.dim() >= 2 else None)

    def exit(self) -> None:
        self.depth -= 1
        if self.depth == 0:
            if self._hook is not None:
                self._hook.remove()
                self._hook = None
            for m in self.modules:
                m.__dict__.pop("forward", None)

    def __enter__(self):
        return self.enter()

    def __exit__(self, *exc):
        self.exit()
        return False


def draft_bf16() -> bool:
    """Whether a draft's linears run on the skinny kernel with bfloat16 weights (OPTIMUM_UAG_DRAFT_BF16=0: float32)."""
    return os.environ.get("OPTIMUM_UAG_DRAFT_BF16", "1") != "0"


def packed_weights(model: torch.nn.Module, enabled: bool | None = None, bf16: bool = False) -> PackedWeights | None:
    """The model's PackedWeights when the policy (module doc) says so; None otherwise. bf16=True (a draft's weights
    only: its rounding changes what it proposes, never what the target accepts): every eligible linear on the skinny
    kernel in bfloat16, where the kernel is available (else the float32 policy)."""
    if enabled is False or (enabled is None and os.environ.get("OPTIMUM_UAG_PACKED_WEIGHTS", "1") == "0"):
        return None
    state = model_state(model)
    # the measured choice, or every eligible linear; ranks of a multi-process run each measure for themselves and
    # could choose different kernels (different rounding in replicated layers): there every eligible linear, the same
    # on every rank
    measured = enabled is None and not _several_processes()
    if not any(p.device.type == "cpu" and p.dtype == torch.float32 for p in model.parameters()):
        return None  # (a CUDA / HPU / half-precision model: nothing to pack, no kernel to build)
    bf16 = bf16 and any(_skinny_eligible(m) for m in model.modules()) and skinny.available()
    key = "packed_bf16" if bf16 else "packed" if measured else "packed_all"
    if key in state:
        return state[key]
    pack = PackedWeights(model, measured=measured, bf16=bf16)
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
        self.pack.enter(shape[0] * shape[1])
        try:
            return self.model(**kwargs)
        finally:
            self.pack.exit()
