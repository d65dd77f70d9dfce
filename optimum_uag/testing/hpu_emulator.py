"""A fake `habana_frameworks` that lets optimum-habana's own Gaudi model classes run on CPU (a test tool).

Everything computes with real torch math on the CPU; what would be hardware behaviour is *counted*:

- `habana_frameworks.torch.core.mark_step` counts lazy-mode graph breaks (``emulator.mark_steps``); calls made
  while a captured HPU graph is being replayed are not counted, as on Gaudi, where a replay runs no Python.
- `habana_frameworks.torch.hpu.wrap_in_hpu_graph` behaves as habana's: one capture per input hash (tensor shapes,
  not dtypes; other arguments by hash()), counted in ``emulator.captures``. A capture records the aten ops the
  forward dispatches, with the tensors it reads by reference; a replay copies the new inputs into the captured
  input tensors and re-executes that record without running Python: anything the forward reads through an
  attribute (a KV-cache tensor, a `slots` index, a Python int) is what it was at capture. It returns the capture's
  own output tensors, refilled.
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
import os
import subprocess
import sys
import types
import weakref
from collections import defaultdict

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_unflatten

# The SynapseAI release optimum-habana 1.21.2 validates (optimum/habana/utils/misc.py).
EMULATED_SYNAPSE_VERSION = "1.24.0"
_PROBE = "pip list | grep habana-torch-plugin"
_ACTIVE: list["HPUEmulator"] = []
_WRAPPED: "weakref.WeakSet[torch.nn.Module]" = weakref.WeakSet()  # every wrapped module (clear_graphs)


_MODULES: dict[str, types.ModuleType] = {}  # built once: optimum-habana binds them at import time


def _current() -> "HPUEmulator | None":
    return _ACTIVE[-1] if _ACTIVE else None


def mark_step(*args, **kwargs) -> None:
    """habana_frameworks.torch.core.mark_step: counted by the active emulator (not during graph replays)."""
    emulator = _current()
    if emulator is not None and not emulator._replaying:
        emulator.mark_steps += 1
        if emulator._lazy is not None:
            emulator._lazy.close()


class _LazyGraphs(TorchDispatchMode):
    """Lazy mode's graph cache, modelled: the ops dispatched between two mark_steps form one graph, identified by
    each op's name, its tensors' shapes and dtypes and its non-tensor arguments (Python ints such as slice offsets
    are baked into a lazy graph: a new offset is a new graph, compiled anew on Gaudi)."""

    def __init__(self):
        super().__init__()
        self.ops: list = []
        self.graphs: set = set()
        self.segments = 0  # graphs executed (mark_steps that closed a non-empty graph)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        emulator = _current()
        if emulator is not None and not emulator._replaying:
            flat, _ = tree_flatten((args, kwargs))
            self.ops.append((str(func), tuple(
                (tuple(a.shape), str(a.dtype)) if isinstance(a, torch.Tensor) else repr(a) for a in flat)))
        return func(*args, **kwargs)

    def close(self) -> None:
        if self.ops:
            self.segments += 1
            self.graphs.add(hash(tuple(self.ops)))
            self.ops = []


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
        # optimum-habana passes the table as (1, 1, S, D) (apply_customized_rope_module) or (S, D): index positions
        while cos.dim() > 2 and cos.shape[0] == 1:
            cos, sin = cos[0], sin[0]
        _check_index("FusedRoPE position_ids", position_ids, cos.shape[0])
        cos, sin = cos[position_ids], sin[position_ids]
        if cos.dim() == 3 and x.dim() == 4:  # (B, L, D) -> (B, 1, L, D)
            cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    if mode != RotaryPosEmbeddingMode.BLOCKWISE:
        raise NotImplementedError("the emulator implements blockwise RoPE only")
    return x * cos + _rotate_half(x) * sin


def _check_index(what: str, index: torch.Tensor, size: int) -> None:
    """HPU kernels gather without a bounds check (an out-of-range index reads whatever lies there): the emulator
    raises instead, so that a test sees what would be silent garbage on a Gaudi."""
    if index.numel() and (int(index.min()) < 0 or int(index.max()) >= size):
        raise IndexError(f"{what} out of range: [{int(index.min())}, {int(index.max())}] for a table of {size} "
                         "rows (an HPU kernel does not check bounds: garbage values on a Gaudi)")


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


def _mixture_of_experts(hidden_states, expert_routing_table, router_weights, w1, w2, w3, permuted_weights,
                        activation, experts_min, experts_max):
    """habana's dynamic MoE kernel (torch.ops.hpu.mixture_of_experts), as its documentation and optimum-habana's
    callers define it: each token's output is the sum over its routed experts e of router_weight x
    w3[e](act(w1[e] x) * w2[e] x) (w1 gate, w2 up, w3 down; weights [out, in] when permuted_weights, as nn.Linear
    keeps them, else [in, out]); only experts experts_min..experts_max are held here (expert parallelism: the lists
    index from experts_min), tokens routed elsewhere get nothing from this rank. (No FP8 overload: DeepSeek-V3's
    call with d_scale_w1..3 is not modelled.)"""
    if not _ACTIVE:  # registered for the process, usable only on the emulated machine
        raise RuntimeError("torch.ops.hpu.mixture_of_experts is habana's kernel; outside the HPU emulator there is "
                           "none")
    act = {"silu": torch.nn.functional.silu, "gelu": torch.nn.functional.gelu,
           "relu": torch.nn.functional.relu}[activation]
    out = torch.zeros_like(hidden_states)
    for e in range(experts_min, experts_max + 1):
        gate, up, down = (w[e - experts_min] if permuted_weights else w[e - experts_min].t() for w in (w1, w2, w3))
        weight = (router_weights * (expert_routing_table == e)).sum(-1, keepdim=True)  # (tokens, 1)
        x = hidden_states
        out = out + weight * ((act(x @ gate.t()) * (x @ up.t())) @ down.t())
    return out


_HPU_OPS: list = []  # the torch.library fragment defining the emulated torch.ops.hpu ops (once per process)


def _define_hpu_ops() -> None:
    """Register the kernels optimum-habana calls through torch.ops.hpu (the real ones come with habana's plugin).
    torch.ops registrations are process-wide: defined once and kept; outside the emulator they raise."""
    if _HPU_OPS or hasattr(torch.ops.hpu, "mixture_of_experts"):
        return
    lib = torch.library.Library("hpu", "FRAGMENT")
    lib.define("mixture_of_experts(Tensor hidden_states, Tensor expert_routing_table, Tensor router_weights, "
               "Tensor[] w1, Tensor[] w2, Tensor[] w3, bool permuted_weights, str activation, int experts_min, "
               "int experts_max) -> Tensor")
    lib.impl("mixture_of_experts", _mixture_of_experts, "CompositeExplicitAutograd")
    _HPU_OPS.append(lib)


# ---------------------------------------------------------------------------------------------- HPU graphs
# habana_frameworks/torch/hpu/graphs.py (wrapped_hpugraph_forward), modelled on CPU:
# - a graph is keyed by `input_hash((args, kwargs))`: dicts/lists/tuples recursively, a tensor by its shape and
#   view (NOT its dtype), anything else by Python's hash() (an object without __hash__: its identity);
# - the first call of a key captures: the forward runs once while every aten op it dispatches is recorded on a
#   tape, with the tensors it touches (parameters, buffers, attribute tensors such as KVCache.cache, the tensors
#   inside objects passed as arguments) held by reference. The user inputs are the tensors found in the
#   dicts/lists/tuples of (args, kwargs), and only those;
# - a replay copies the new call's input tensors into the capture's input tensors (copy_to), re-executes the
#   tape (no Python: attribute reads, Python ints, .item() values and control flow are those of the capture)
#   and returns the capture's own output objects, refilled;
# - `bypass_hpu_graphs=True` calls the plain forward; `module.clear_cache()` drops the graphs.
def input_hash(obj) -> int:
    """habana's input_hash: containers recursively, tensors by (shape, view), other objects by hash()."""
    if isinstance(obj, dict):
        return input_hash(tuple(obj.items()))
    if isinstance(obj, (list, tuple)):
        return hash(tuple(input_hash(el) for el in obj))
    if torch.is_tensor(obj):
        return hash((tuple(obj.shape), tuple(obj.stride()), obj.storage_offset()))
    return hash(obj)


def user_input_tensors(inputs) -> list[torch.Tensor]:
    """habana's get_user_input_tensor_list: tensors in dicts/lists/tuples only (not inside other objects)."""
    if isinstance(inputs, dict):
        return [t for item in inputs.items() for t in user_input_tensors(item)]
    if isinstance(inputs, (list, tuple)):
        return [t for item in inputs for t in user_input_tensors(item)]
    return [inputs] if torch.is_tensor(inputs) else []


def copy_to(dst, src) -> None:
    """habana's copy_to: refill the captured inputs from a replay's inputs (types must match). Like habana's, it
    copies a tensor onto itself when the replay passes the captured tensor again (a full memory copy on a Gaudi:
    counted in ``emulator.self_copy_bytes``, not performed)."""
    if type(dst) is not type(src):
        raise AssertionError(f"HPU graph replay: input type changed from {type(dst).__name__} to {type(src).__name__}")
    if isinstance(dst, dict):
        for (dk, dv), (sk, sv) in zip(dst.items(), src.items()):
            assert dk == sk, (dk, sk)
            copy_to(dv, sv)
    elif isinstance(dst, (list, tuple)):
        for d, v in zip(dst, src):
            copy_to(d, v)
    elif torch.is_tensor(dst):
        if dst is src or (dst.data_ptr() == src.data_ptr() and dst.shape == src.shape and dst.stride() == src.stride()):
            emulator = _current()
            if emulator is not None:
                emulator.self_copy_bytes += dst.numel() * dst.element_size()
            return
        dst.copy_(src)


class _Recorder(TorchDispatchMode):
    """Records every aten op of a capture: (op, args, kwargs) with tensors as ("ext", tensor) or ("tape", i, j)."""

    def __init__(self):
        super().__init__()
        self.ops: list = []
        self.produced: dict[int, tuple[int, int]] = {}  # id(tensor) -> (op index, output index)
        self.alive: list = []  # produced tensors kept alive during the capture, so that ids stay unique

    def _ref(self, value):
        if isinstance(value, torch.Tensor):
            slot = self.produced.get(id(value))
            return ("tape", *slot) if slot is not None else ("ext", value)
        return ("val", value)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        flat_args, spec = tree_flatten((args, kwargs))
        flat_out, _ = tree_flatten(out)
        index = len(self.ops)
        self.ops.append((func, [self._ref(a) for a in flat_args], spec))
        for j, value in enumerate(flat_out):
            if isinstance(value, torch.Tensor):
                self.produced[id(value)] = (index, j)
                self.alive.append(value)
        return out


class _Graph:
    """One captured graph: the tape, the capture's input structure and its output objects."""

    def __init__(self, recorder: _Recorder, inputs, outputs):
        self.ops = recorder.ops
        self.inputs = inputs
        self.input_ids = [id(t) for t in user_input_tensors(inputs)]  # the tape holds these tensors
        self.outputs = outputs
        flat, self.out_spec = tree_flatten(outputs)
        self.out_refs = [recorder._ref(v) for v in flat]

    def replay(self, substitute: dict | None = None) -> None:
        results: list = []
        for func, refs, spec in self.ops:
            args, kwargs = tree_unflatten([_resolve(r, results, substitute) for r in refs], spec)
            results.append(tree_flatten(func(*args, **kwargs))[0])
        for captured, ref in zip(tree_flatten(self.outputs)[0], self.out_refs):
            if isinstance(captured, torch.Tensor) and ref[0] == "tape":
                captured.copy_(results[ref[1]][ref[2]])


def _resolve(ref, results, substitute=None):
    kind = ref[0]
    if kind == "tape":
        return results[ref[1]][ref[2]]
    if substitute and kind == "ext":
        return substitute.get(id(ref[1]), ref[1])
    return ref[1]


def wrap_in_hpu_graph(module, asynchronous=False, disable_tensor_cache=False, dry_run=False, max_graphs=None,
                      verbose=False):
    """habana's wrap_in_hpu_graph on CPU: capture once per input_hash, replay a recorded tape (see above).

    Like habana's, it has no already-wrapped guard: wrapping a wrapped module wraps its wrapper, and its first
    call then starts a capture inside a capture, which the emulator refuses (RuntimeError)."""
    original = module.forward
    cache: dict[int, _Graph] = {}

    @functools.wraps(original)
    def forward(*args, **kwargs):
        if kwargs.pop("bypass_hpu_graphs", False):
            return original(*args, **kwargs)
        emulator = _current()
        if emulator is None:
            return original(*args, **kwargs)
        if emulator._capturing:
            raise RuntimeError(f"HPU graph: {emulator.name_of(module)} was called inside another module's capture "
                               "(a capture or replay nested in a capture: wrap_in_hpu_graph was applied twice, "
                               "habana's wrapper has no guard against it)")
        # as habana's: the environment variable, when set, overrides the argument, per call
        env = os.environ.get("PT_HPUGRAPH_DISABLE_TENSOR_CACHE")
        no_tensor_cache = disable_tensor_cache if env is None else env == "1"
        inputs = (args, kwargs)
        key = input_hash(inputs)
        graph = cache.get(key)
        if graph is None:
            if max_graphs is not None and len(cache) == max_graphs:
                return original(*args, **kwargs)
            emulator.captures[emulator.name_of(module)] += 1
            emulator.capture_log.append((emulator.name_of(module), {
                k: (tuple(v.shape), tuple(v.stride()), v.storage_offset()) for k, v in kwargs.items()
                if isinstance(v, torch.Tensor)} | {k: repr(v)[:40] for k, v in kwargs.items() if not isinstance(v, (torch.Tensor, tuple, list))}))
            recorder = _Recorder()
            emulator._capturing += 1
            try:
                with recorder:
                    outputs = original(*args, **kwargs)
            finally:
                emulator._capturing -= 1
            cache[key] = _Graph(recorder, inputs, outputs)
            recorder.alive.clear()
            return outputs
        substitute = None
        if no_tensor_cache:
            # replayV3(input list): the graph reads this call's input tensors; the captured ones are not refilled
            substitute = dict(zip(graph.input_ids, user_input_tensors(inputs)))
        elif graph.inputs is None:
            raise RuntimeError("HPU graph replay with the tensor cache after clear_inputs(): the captured inputs "
                               "are gone (set PT_HPUGRAPH_DISABLE_TENSOR_CACHE=1 as optimum-habana does)")
        else:
            copy_to(graph.inputs, inputs)
        emulator._replaying += 1
        try:
            with torch.no_grad():
                graph.replay(substitute)
        finally:
            emulator._replaying -= 1
        emulator.replays[emulator.name_of(module)] += 1
        return graph.outputs

    module.forward = forward
    module.clear_cache = cache.clear

    def clear_inputs():  # habana's: drop the references to every graph's captured input tensors
        for graph in cache.values():
            graph.inputs = None

    module.clear_inputs = clear_inputs
    _WRAPPED.add(module)
    return module


# -------------------------------------------------------------------------------------------- the emulator
class HPUEmulator(contextlib.AbstractContextManager):
    """Installs the fake `habana_frameworks` (and answers optimum-habana's probes) while active."""

    def __init__(self, device_name: str = "GAUDI2", device_count: int = 1, lazy_graphs: bool = False):
        self.device_name = device_name
        self._lazy = _LazyGraphs() if lazy_graphs else None
        self.device_count = device_count
        self.mark_steps = 0
        self.captures: dict[str, int] = defaultdict(int)
        self.capture_log: list = []  # (model name, {tensor kwarg: shape}) of every capture, in order
        self.replays: dict[str, int] = defaultdict(int)
        self.names: dict[int, str] = {}
        self._replaying = 0
        self._capturing = 0
        self.self_copy_bytes = 0  # bytes habana's copy_to would copy onto themselves (a captured input passed again)
        self._saved_modules: dict[str, types.ModuleType | None] = {}
        self._saved_run = None

    # counters
    def reset_counters(self, clear_graphs: bool = False) -> None:
        """Zero the counters; with clear_graphs, also forget captured graphs (as htcore's clear_cache)."""
        self.mark_steps = 0
        self.captures.clear()
        self.capture_log.clear()
        self.replays.clear()
        self.self_copy_bytes = 0
        if self._lazy is not None:
            self._lazy.ops, self._lazy.graphs = [], set()
        if clear_graphs:
            for module in list(_WRAPPED):
                module.clear_cache()

    @property
    def lazy_graphs(self) -> int:
        """Distinct lazy-mode graphs seen so far (HPUEmulator(lazy_graphs=True) only)."""
        if self._lazy is None:
            raise RuntimeError("construct the emulator with HPUEmulator(lazy_graphs=True) to count lazy graphs")
        return len(self._lazy.graphs)

    @contextlib.contextmanager
    def counting_lazy_graphs(self):
        """Count distinct lazy-mode graphs (ops between mark_steps) inside the block: `with ... as lazy: len(lazy.graphs)`."""
        lazy, previous = _LazyGraphs(), self._lazy
        self._lazy = lazy
        try:
            with lazy:
                yield lazy
        finally:
            lazy.close()
            self._lazy = previous

    def name_of(self, module) -> str:
        name = self.names.get(id(module))
        owner = getattr(module, "_model", None)  # optimum-uag's GraphStep: reported under its model's name
        if name is None and isinstance(owner, weakref.ref) and owner() is not None:
            name = self.names.get(id(owner()))
        return name or type(module).__name__

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
        # habana registers torch.hpu; the emulated machine has no HPU device (tensors stay on the CPU), which is
        # what libraries that probe it (Intel Neural Compressor's accelerator detection) must see
        self._added_torch_hpu = not hasattr(torch, "hpu")
        if self._added_torch_hpu:
            torch.hpu = types.SimpleNamespace(is_available=lambda: False, device_count=lambda: 0,
                                              synchronize=lambda *a, **k: None)
        _define_hpu_ops()
        # DeepSpeed would take the emulated modules for a real HPU (its HPU accelerator needs habana's runtime); on
        # the emulated machine (a CPU) it runs its CPU accelerator, as the multi-card tests do. (DeepSpeed picks its
        # accelerator once, at its first import: imported while emulating, it keeps the CPU one afterwards.)
        self._saved_ds_accelerator = os.environ.get("DS_ACCELERATOR")
        os.environ["DS_ACCELERATOR"] = "cpu"
        _ACTIVE.append(self)
        if self._lazy is not None:
            self._lazy.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._lazy is not None:
            self._lazy.__exit__(*exc)
        _ACTIVE.remove(self)
        if self._saved_ds_accelerator is None:
            os.environ.pop("DS_ACCELERATOR", None)
        else:
            os.environ["DS_ACCELERATOR"] = self._saved_ds_accelerator
        subprocess.run = self._saved_run
        if self._added_torch_hpu:
            del torch.hpu
        for name, mod in self._saved_modules.items():
            if mod is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = mod
        self._saved_modules.clear()
