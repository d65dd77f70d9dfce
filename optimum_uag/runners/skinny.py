"""The skinny linear kernel (kernels/skinny.c): a linear over a few rows that streams the weights once for all rows.

A verify block (a draft tree and its root, 4-17 tokens) multiplies every weight matrix of the target by a handful of
rows. MKL's sgemm, behind `F.linear` on a CPU, serves 1-3 rows with a kernel that streams the weights once, and from 4
rows on switches to a blocked GEMM that packs its operands on every call: on this project's Intel Xeon a SmolLM2-135M
forward costs 39 ms at 3 tokens and 52 ms at 4 (benchmarks/results/verify_cost_intel.json), oneDNN's prepacked
kernel is no better there (runners/packed.py), and so a tree of more than 3 tokens did not pay. This kernel keeps the
weights packed once, in groups of output columns, each core reading two groups at once as two forward streams
(prefetched ahead), and multiplies all rows of a block against them while they are in cache: the forward's cost stays
near a one-token forward's up to about 9 tokens (docs/benchmarks.md, "The skinny kernel"). With two streams a core it
reads memory faster than MKL's one-row sgemv on that Xeon, so steps of 1-3 rows can run on it too.

It is plain C with OpenMP (no Python or torch headers), built once per machine with the system's C compiler (`cc`,
or $CC) for AVX-512F or AVX2 + FMA, into ~/.cache/optimum_uag/kernels (or $OPTIMUM_UAG_KERNEL_CACHE), 1-2 seconds,
and called through ctypes. Where it cannot be built (no compiler, another instruction set) the linears keep their own
kernels and one warning says why. OPTIMUM_UAG_SKINNY=0 turns it off. runners/packed.py decides where it runs: blocks
of MIN_ROWS to MAX_ROWS rows for the weight shapes where it measures faster on this machine, and fewer rows for those
where it measures no slower there.

Every output is one fused multiply-add per k, k in order, whatever the number of rows computed with it: a row's
result does not depend on the block it came in (tested). Its rounding differs from MKL's (fp32, as between any two
GEMM kernels); the greedy tests compare tokens with the model's own generate().
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
import warnings
from pathlib import Path

import torch

SOURCE = Path(__file__).with_name("kernels") / "skinny.c"
FLAGS = {"avx512": ["-mavx512f", "-mfma"], "avx2": ["-mavx2", "-mfma"]}
MIN_ROWS = 4  # a block from here (MKL's blocked GEMM); fewer rows run the kernel where it measures no slower there
MAX_ROWS = 64  # above this (a prefill) a blocked GEMM is the better kernel

_LOCK = threading.Lock()
_STATE: dict = {}  # "lib": the loaded library, or "error": why there is none


def instruction_set() -> str | None:
    """'avx512', 'avx2' or None: what this CPU offers the kernel (x86-64 Linux flags)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return None
    if "avx512f" in flags and "fma" in flags:
        return "avx512"
    if "avx2" in flags and "fma" in flags:
        return "avx2"
    return None


def cache_dir() -> Path:
    return Path(os.environ.get("OPTIMUM_UAG_KERNEL_CACHE") or Path.home() / ".cache" / "optimum_uag" / "kernels")


def _openmp_runtimes() -> list[str]:
    """The OpenMP runtimes this process has loaded (/proc/self/maps): torch's own, normally."""
    try:
        with open("/proc/self/maps", encoding="utf-8") as f:
            paths = {line.split()[-1] for line in f if "/" in line}
    except OSError:
        return []
    names = ("libgomp", "libiomp", "libomp")
    return sorted(p for p in paths if os.path.basename(p).startswith(names))


def _threaded(runtimes: list[str] | None = None, torch_lib: str | None = None) -> bool:
    """Whether the kernel may use OpenMP: a gcc build links `libgomp.so.1`, which resolves to the runtime torch has
    already loaded under that name (one thread pool). Where torch brought another runtime (a renamed libgomp in some
    wheels, Intel's or LLVM's), a second pool would spin against torch's on the same cores: the kernel is then built
    single-threaded (and `runners/packed.py` measures whether it still pays). Renamed runtimes other packages load
    beside torch's (scikit-learn's `libgomp-<hash>.so`, pulled in by torchao) are not what `libgomp.so.1` resolves
    to, so they do not decide it; where torch's own runtime is not under its directory, every loaded one does."""
    runtimes = _openmp_runtimes() if runtimes is None else runtimes
    torch_lib = torch_lib or os.path.dirname(os.path.realpath(torch.__file__))
    own = [p for p in runtimes if os.path.realpath(p).startswith(torch_lib + os.sep)] or runtimes
    return all(os.path.basename(p) == "libgomp.so.1" for p in own)


def _build(isa: str, threaded: bool = True) -> Path:
    source = SOURCE.read_bytes()
    compiler = os.environ.get("CC") or "cc"
    flags = ["-O3", "-fPIC", "-shared", *(["-fopenmp"] if threaded else []), *FLAGS[isa]]
    digest = hashlib.sha256(source + " ".join([compiler, *flags]).encode()).hexdigest()[:16]
    out = cache_dir() / f"skinny-{isa}{'' if threaded else '-serial'}-{digest}.so"
    if out.exists():
        return out
    if shutil.which(compiler) is None:
        raise RuntimeError(f"no C compiler ({compiler!r} not found; install gcc, or set CC)")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        built = Path(tmp) / out.name
        run = subprocess.run([compiler, *flags, "-o", str(built), str(SOURCE)], capture_output=True, text=True,
                             timeout=300)
        if run.returncode != 0:
            raise RuntimeError(f"{compiler} failed: {(run.stderr or run.stdout).strip()[-400:]}")
        os.replace(built, out)  # atomic: another process building at the same time loads one whole file
    return out


def load(isa: str, threaded: bool = True):
    """Build (once per machine, source and flags) and load the kernel for `isa` ('avx512' or 'avx2')."""
    lib = ctypes.CDLL(str(_build(isa, threaded)))
    c_i64, c_ptr = ctypes.c_int64, ctypes.c_void_p
    lib.skinny_linear.argtypes = [c_ptr, c_i64, c_i64, c_ptr, c_i64, c_ptr, c_ptr, ctypes.c_int]
    lib.skinny_linear.restype = None
    lib.skinny_pack.argtypes = [c_ptr, c_i64, c_i64, c_ptr]
    lib.skinny_pack.restype = None
    lib.skinny_linear_bf16.argtypes = lib.skinny_linear.argtypes
    lib.skinny_linear_bf16.restype = None
    lib.skinny_pack_bf16.argtypes = lib.skinny_pack.argtypes
    lib.skinny_pack_bf16.restype = None
    lib.skinny_packed_size.argtypes = [c_i64, c_i64]
    lib.skinny_packed_size.restype = c_i64
    lib.threaded = threaded
    return lib


def library():
    """The loaded kernel library, or None (the reason warned once; OPTIMUM_UAG_SKINNY=0: None, silently). A compiler
    that refuses AVX-512 gets the AVX2 build, one without OpenMP the single-threaded one."""
    if os.environ.get("OPTIMUM_UAG_SKINNY", "1") == "0":
        return None
    with _LOCK:
        if "lib" not in _STATE and "error" not in _STATE:
            isa = instruction_set()
            errors = []
            if isa is None:
                errors.append("this CPU has neither AVX-512F nor AVX2 + FMA")
            else:
                threaded = _threaded()
                variants = [(isa, threaded)] + ([("avx2", threaded)] if isa == "avx512" else [])
                variants += [(i, False) for i, t in variants if t]
                for variant in variants:
                    try:
                        _STATE["lib"] = load(*variant)
                        break
                    except Exception as err:  # (no compiler, a failed build, an unloadable file)
                        errors.append(f"{type(err).__name__}: {err}")
                        if "no C compiler" in str(err):
                            break
            if "lib" not in _STATE:
                _STATE["error"] = errors[0]
                warnings.warn("optimum-uag: the skinny linear kernel is not available here "
                              f"({_STATE['error']}); verify blocks run on the default linear kernel "
                              "(OPTIMUM_UAG_SKINNY=0 silences this)", stacklevel=3)
        return _STATE.get("lib")


def available() -> bool:
    return library() is not None


def eligible(module: torch.nn.Module) -> bool:
    """A plain float32 CPU nn.Linear (the only layers the kernel replaces)."""
    weight = getattr(module, "weight", None)
    bias = getattr(module, "bias", None)
    return (type(module) is torch.nn.Linear and isinstance(weight, torch.Tensor) and weight.dtype == torch.float32
            and weight.device.type == "cpu" and weight.dim() == 2
            and (bias is None or (bias.dtype == torch.float32 and bias.device.type == "cpu"))
            and not torch.nn.utils.parametrize.is_parametrized(module))


class SkinnyWeight:
    """One weight matrix packed for the kernel (a copy: the module's own weight is left as it is). An input the
    kernel does not take (not float32 on the CPU, or under autograd with the input or the weight requiring grad) goes
    to `fallback` (the linear's own kernel), or raises where there is none. bf16=True: the copy in bfloat16 (rounded
    to nearest even), half the bytes streamed, widened to float32 on load (inputs, products, sums and outputs stay
    float32): for a draft's weights, never a target's (runners/packed.py `packed_weights(..., bf16=True)`)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None, lib=None, fallback=None,
                 bf16: bool = False):
        lib = lib or library()
        if lib is None:
            raise RuntimeError(f"the skinny kernel is not available: {_STATE.get('error', 'OPTIMUM_UAG_SKINNY=0')}")
        self.lib, self.fallback, self.source = lib, fallback, weight
        packed_from = weight.detach().to(device="cpu", dtype=torch.float32).contiguous()
        self.out_features, self.in_features = packed_from.shape
        self.bf16 = bf16
        self.packed = torch.empty(lib.skinny_packed_size(self.out_features, self.in_features),
                                  dtype=torch.int16 if bf16 else torch.float32)
        (lib.skinny_pack_bf16 if bf16 else lib.skinny_pack)(packed_from.data_ptr(), self.out_features,
                                                            self.in_features, self.packed.data_ptr())
        # (a copy: the kernel keeps its address, which the module's own bias could give up when replaced)
        self.bias = (None if bias is None
                     else bias.detach().to(device="cpu", dtype=torch.float32, copy=True).contiguous())
        self.nbytes = self.packed.numel() * self.packed.element_size()
        # (the call's own cost matters: ~200 calls a SmolLM2 forward; addresses kept, the tensors held above)
        self._run, self._threaded = lib.skinny_linear_bf16 if bf16 else lib.skinny_linear, lib.threaded
        self._packed_ptr = self.packed.data_ptr()
        self._bias_ptr = None if self.bias is None else self.bias.data_ptr()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if (x.dtype is not torch.float32 or not x.is_cpu or x.shape[-1] != self.in_features
                or (torch.is_grad_enabled() and (x.requires_grad or self.source.requires_grad))):
            if self.fallback is not None:
                return self.fallback(x)
            raise RuntimeError(f"skinny linear: takes float32 CPU inputs of width {self.in_features} without "
                               f"autograd, got {x.dtype} on {x.device.type} of width {x.shape[-1]}")
        if not x.is_contiguous():
            x = x.contiguous()
        y = torch.empty(*x.shape[:-1], self.out_features, dtype=torch.float32, device="cpu")  # (faster than new_empty)
        self._run(x.data_ptr(), x.numel() // self.in_features, self.in_features, self._packed_ptr, self.out_features,
                  self._bias_ptr, y.data_ptr(), torch.get_num_threads() if self._threaded else 1)
        return y
