"""A fake `habana_frameworks` that lets optimum-habana's own Gaudi model classes run on CPU (a test tool).

Everything computes with real torch math on the CPU; what would be hardware behaviour is *counted*:

- `habana_frameworks.torch.core.mark_step` counts lazy-mode graph breaks (``emulator.mark_steps``); calls made
  while a captured HPU graph is being replayed are not counted, as on Gaudi, where a replay runs no Python.
- `habana_frameworks.torch.hpu.wrap_in_hpu_graph` returns the module with its forward wrapped: every distinct
  input signature (tensor shapes/dtypes and static arguments) is one graph capture (``emulator.captures``).
  As on Gaudi, a replay copies the new inputs into the captured input tensors, runs on those, and returns the
  *same* output tensors as the capture, refilled: a caller that keeps the logits of one call across the next
  call of the same shape sees them overwritten, and in-place writes land in the captured inputs.
- hpex kernels (`FusedSDPA`, `FusedRMSNorm`, `RotaryPosEmbeddingHelperV1/V2/V3`, `apply_rotary_pos_emb`) are
  implemented with the reference formulas, so logits match plain transformers within fp32 tolerance.
- optimum-habana's import-time synapse version probe (``pip list | grep habana-torch-plugin``) is answered, and a
  minimal `torchvision` is provided only when the real one cannot be imported.

Production code never imports this module. Use::

    with HPUEmulator() as emu:
        from optimum.habana.transformers.modeling_utils import adapt_transformers_to_gaudi
        adapt_transformers_to_gaudi()
        ...
        emu.captures, emu.mark_steps
"""
from __future__ import annotations

import contextlib
import enum
import functools
import importlib
import importlib.machinery
import subprocess
import sys
import types
from collections import defaultdict

import torch

# The SynapseAI release optimum-habana 1.21.2 validates (optimum/habana/utils/misc.py).
EMULATED_SYNAPSE_VERSION = "1.24.0"
_PROBE = "pip list | grep habana-torch-plugin"
_ACTIVE: list["HPUEmulator"] = []
_GRAPH_CACHES: list[set] = []  # the signature set of every wrapped module


_MODULES: dict[str, types.ModuleType] = {}  # built once: optimum-habana binds them at import time


def _current() -> "HPUEmulator | None":
    return _ACTIVE[-1] if _ACTIVE else None


def mark_step(*args, **kwargs) -> None:
    """habana_frameworks.torch.core.mark_step: counted by the active emulator (not during graph replays)."""
    emulator = _current()
    if emulator is not None and not emulator._replaying:
        emulator.mark_steps += 1


# ----------------------------------------------------------------------------------------------- hpex kernels
def _rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class RotaryPosEmbeddingMode(enum.Enum):
    BLOCKWISE = 0
    PAIRWISE = 1


def apply_rotary_pos_emb(x, cos, sin, position_ids=None, offset=0, mode=RotaryPosEmbeddingMode.BLOCKWISE):
    """Reference RoPE (blockwise = transformers' rotate_half convention)."""
    if position_ids is not None:
        cos, sin = cos[position_ids], sin[position_ids]
        if cos.dim() == 3 and x.dim() == 4:  # (B, L, D) -> (B, 1, L, D)
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    if mode != RotaryPosEmbeddingMode.BLOCKWISE:
        raise NotImplementedError("the emulator implements blockwise RoPE only")
    return x * cos + _rotate_half(x) * sin


class _RotaryHelper(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, cos, sin, position_ids=None, offset=0, mode=RotaryPosEmbeddingMode.BLOCKWISE):
        return apply_rotary_pos_emb(x, cos, sin, position_ids, offset, mode)


class RotaryPosEmbeddingHelperV1(_RotaryHelper):
    pass


class RotaryPosEmbeddingHelperV2(_RotaryHelper):
    pass


class RotaryPosEmbeddingHelperV3(_RotaryHelper):
    pass


class FusedSDPA(torch.autograd.Function):
    """habana's fused scaled-dot-product attention, with torch's SDPA (a 0/-inf additive or boolean mask)."""

    @staticmethod
    def forward(ctx, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, softmax_mode="None",
                recompute_mode=None, valid_sequence_lengths=None, padding_side="left"):
        if attn_mask is not None and attn_mask.shape[-1] != k.shape[-2]:
            attn_mask = attn_mask[..., : k.shape[-2]]
        if k.shape[1] != q.shape[1]:  # grouped-query attention
            k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
            v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
        return torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal and attn_mask is None, scale=scale
        )


class FusedRMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden_states, weight, eps):
        dtype = hidden_states.dtype
        x = hidden_states.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        return weight * x.to(dtype)


# ---------------------------------------------------------------------------------------------- HPU graphs
def _signature(args, kwargs) -> tuple:
    def sig(value):
        if isinstance(value, torch.Tensor):
            return ("T", tuple(value.shape), str(value.dtype))
        if isinstance(value, (list, tuple)):
            return tuple(sig(v) for v in value)
        if isinstance(value, dict):
            return tuple((k, sig(v)) for k, v in sorted(value.items()))
        if value is None or isinstance(value, (bool, int, float, str, torch.Size, torch.dtype)):
            return value
        return type(value).__name__  # objects (caches) are captured by identity of their tensors' shapes
    return (sig(list(args)), sig(kwargs))


def _copy_into(dst, src) -> None:
    """Refill captured tensors with a replay's values, in place (other values are part of the signature)."""
    if isinstance(dst, torch.Tensor):
        if dst is not src:
            dst.copy_(src)
    elif isinstance(dst, dict):  # ModelOutput included
        for key in dst:
            _copy_into(dst[key], src[key])
    elif isinstance(dst, (list, tuple)):
        for d, v in zip(dst, src):
            _copy_into(d, v)


def wrap_in_hpu_graph(module, asynchronous=False, disable_tensor_cache=False, dry_run=False, max_graphs=None,
                      verbose=False):
    """Record one capture per distinct input signature of `module.forward`; replays do not count mark_steps."""
    if getattr(module, "_hpu_graph_signatures", None) is not None:
        return module
    original = module.forward
    signatures: dict = {}  # signature -> (captured args, kwargs, outputs)

    @functools.wraps(original)
    def forward(*args, **kwargs):
        emulator = _current()
        if emulator is None:
            return original(*args, **kwargs)
        key = _signature(args, kwargs)
        if key in signatures:
            # habana's replay: copy the new inputs into the captured input tensors, run the graph on those,
            # return the captured output tensors refilled (in-place writes land in the captured inputs)
            captured_args, captured_kwargs, captured_outputs = signatures[key]
            _copy_into((captured_args, captured_kwargs), (args, kwargs))
            emulator._replaying += 1
            try:
                outputs = original(*captured_args, **captured_kwargs)
            finally:
                emulator._replaying -= 1
            _copy_into(captured_outputs, outputs)
            return captured_outputs
        emulator.captures[emulator.name_of(module)] += 1
        outputs = original(*args, **kwargs)
        signatures[key] = (args, kwargs, outputs)
        return outputs

    module.forward = forward
    module._hpu_graph_signatures = signatures
    _GRAPH_CACHES.append(signatures)
    return module


# -------------------------------------------------------------------------------------------- the emulator
class HPUEmulator(contextlib.AbstractContextManager):
    """Installs the fake `habana_frameworks` (and answers optimum-habana's probes) while active."""

    def __init__(self, device_name: str = "GAUDI2", device_count: int = 1):
        self.device_name = device_name
        self.device_count = device_count
        self.mark_steps = 0
        self.captures: dict[str, int] = defaultdict(int)
        self.names: dict[int, str] = {}
        self._replaying = 0
        self._saved_modules: dict[str, types.ModuleType | None] = {}
        self._saved_run = None

    # counters
    def reset_counters(self, clear_graphs: bool = False) -> None:
        """Zero the counters; with clear_graphs, also forget captured graphs (as htcore's clear_cache)."""
        self.mark_steps = 0
        self.captures.clear()
        if clear_graphs:
            for signatures in _GRAPH_CACHES:
                signatures.clear()

    def name_of(self, module) -> str:
        return self.names.get(id(module), type(module).__name__)

    def name(self, module, name: str) -> None:
        """Report the captures of `module` under `name` (e.g. "target", "assistant")."""
        self.names[id(module)] = name

    # installation
    @staticmethod
    def _modules() -> dict[str, types.ModuleType]:
        if _MODULES:
            return _MODULES

        def active(attr, default):
            return lambda *a, **k: getattr(_current(), attr, default)

        def module(name, **attrs):
            mod = types.ModuleType(name)
            mod.__dict__.update(attrs)
            mod.__file__ = __file__
            mod.__path__ = []  # a package: submodules resolve through sys.modules
            # importlib.util.find_spec() (datasets probes torchvision with it) needs a spec, as real modules have
            mod.__spec__ = importlib.machinery.ModuleSpec(name, loader=None, is_package=True)
            return mod

        class synDeviceType(enum.IntEnum):  # noqa: N801 (habana's spelling)
            synDeviceGaudi = 1
            synDeviceGaudi2 = 2
            synDeviceGaudi3 = 3

        def device_kind():
            name = getattr(_current(), "device_name", "GAUDI2").upper()
            return synDeviceType({"GAUDI": 1, "GAUDI2": 2, "GAUDI3": 3}.get(name, 2))

        hpu_random = module("habana_frameworks.torch.hpu.random", manual_seed_all=torch.manual_seed,
                            manual_seed=torch.manual_seed, get_rng_state=torch.get_rng_state,
                            set_rng_state=torch.set_rng_state, initial_seed=torch.initial_seed)
        hpu = module(
            "habana_frameworks.torch.hpu",
            is_available=lambda: True,
            device_count=active("device_count", 1),
            current_device=lambda: 0,
            set_device=lambda *a, **k: None,
            synchronize=lambda *a, **k: None,
            get_device_name=active("device_name", "GAUDI2"),
            wrap_in_hpu_graph=wrap_in_hpu_graph,
            memory_stats=lambda *a, **k: {"InUse": 0, "MaxInUse": 0, "Limit": 0},
            max_memory_allocated=lambda *a, **k: 0,
            memory_allocated=lambda *a, **k: 0,
            reset_peak_memory_stats=lambda *a, **k: None,
            sdp_kernel=lambda *a, **k: contextlib.nullcontext(),
            random=hpu_random,
            graphs=module("habana_frameworks.torch.hpu.graphs", wrap_in_hpu_graph=wrap_in_hpu_graph),
        )
        core = module("habana_frameworks.torch.core", mark_step=mark_step,
                      hpu_set_env=lambda *a, **k: None, hpu_initialize=lambda *a, **k: None)
        kernels = module(
            "habana_frameworks.torch.hpex.kernels", FusedSDPA=FusedSDPA,
            RotaryPosEmbeddingHelperV1=RotaryPosEmbeddingHelperV1, RotaryPosEmbeddingHelperV2=RotaryPosEmbeddingHelperV2,
            RotaryPosEmbeddingHelperV3=RotaryPosEmbeddingHelperV3, RotaryPosEmbeddingMode=RotaryPosEmbeddingMode,
            apply_rotary_pos_emb=apply_rotary_pos_emb,
        )
        normalization = module("habana_frameworks.torch.hpex.normalization", FusedRMSNorm=FusedRMSNorm)
        hpex = module("habana_frameworks.torch.hpex", kernels=kernels, normalization=normalization)
        experimental = module("habana_frameworks.torch.utils.experimental", synDeviceType=synDeviceType,
                              _get_device_type=device_kind, hpu=hpu)
        internal = module("habana_frameworks.torch.utils.internal", is_lazy=lambda: True)
        utils = module("habana_frameworks.torch.utils", experimental=experimental, internal=internal)
        ht = module("habana_frameworks.torch", hpu=hpu, core=core, hpex=hpex, utils=utils, dtype=torch)
        root = module("habana_frameworks", torch=ht, __version__=EMULATED_SYNAPSE_VERSION)
        _MODULES.update({m.__name__: m for m in (root, ht, core, hpu, hpu.graphs, hpu_random, hpex, kernels,
                                                 normalization, utils, experimental, internal)})
        if not HPUEmulator._torchvision_importable():
            _MODULES.update(HPUEmulator._torchvision_stub(module))
        return _MODULES

    @staticmethod
    def _torchvision_importable() -> bool:
        if "torchvision" in sys.modules:
            return True
        try:
            importlib.import_module("torchvision")
            return True
        except Exception:  # PyPI torchvision does not import beside torch 2.13.0+cpu
            sys.modules.pop("torchvision", None)
            return False

    @staticmethod
    def _torchvision_stub(module) -> dict:
        """Only what optimum-habana's model files touch at import time (glm4v's tokenizer imports `transforms`)."""
        def unavailable(*args, **kwargs):
            raise RuntimeError("torchvision is not usable here; the HPU emulator provides import-time names only")

        transforms = module("torchvision.transforms", Compose=unavailable, Resize=unavailable, ToTensor=unavailable,
                            Normalize=unavailable, InterpolationMode=enum.Enum("InterpolationMode", "BICUBIC BILINEAR"),
                            functional=module("torchvision.transforms.functional"))
        tv = module("torchvision", transforms=transforms, __version__="0.0.0+emulator")
        return {"torchvision": tv, "torchvision.transforms": transforms,
                "torchvision.transforms.functional": transforms.functional}

    def _run(self, *args, **kwargs):
        command = args[0] if args else kwargs.get("args")
        if command == _PROBE:
            return subprocess.CompletedProcess(command, 0, f"habana-torch-plugin {EMULATED_SYNAPSE_VERSION}\n", "")
        if command == "hl-smi":
            return subprocess.CompletedProcess(command, 1, "", "hl-smi: emulated HPU")
        return self._saved_run(*args, **kwargs)

    def __enter__(self) -> "HPUEmulator":
        if _ACTIVE:
            raise RuntimeError("an HPU emulator is already installed")
        for name, mod in self._modules().items():
            self._saved_modules[name] = sys.modules.get(name)
            sys.modules[name] = mod
        self._saved_run = subprocess.run
        subprocess.run = self._run
        _ACTIVE.append(self)
        return self

    def __exit__(self, *exc) -> None:
        _ACTIVE.remove(self)
        subprocess.run = self._saved_run
        for name, mod in self._saved_modules.items():
            if mod is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = mod
        self._saved_modules.clear()
