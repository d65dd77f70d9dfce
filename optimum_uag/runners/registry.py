"""Pick a runner per model by capability (a short probe against the model's own forward), once per model;
backends (Gaudi) register plan hooks that take over the models they own."""
from __future__ import annotations

import copy
import functools
import warnings
from dataclasses import dataclass
from typing import Callable

import torch

from ..registry import OWN_GENERATE, model_state
from .common import accepts, cache_argument, local_attention_sizes, returned_cache
from .own_cache import OwnCacheRunner, PerRowRunner, StepwiseRunner, records_past
from .packed import PackedCall, packed_weights
from .static import StaticCacheRunner

# In order of preference: fixed shapes first, then the model's own cache, then one row (and token) at a time.
RUNNERS = {"static": StaticCacheRunner, "dynamic": OwnCacheRunner, "per_row": PerRowRunner,
           "stepwise": StepwiseRunner}


def _tolerance(dtype: torch.dtype) -> float:
    return {torch.float64: 1e-7, torch.float32: 1e-4}.get(dtype, 3e-2)


def _agrees(a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype) -> bool:
    """Element-wise within the dtype's tolerance (a logit bias of -1e4 on some tokens must not loosen the check on
    the others); half precision is compared against the row's largest logit, since a different block size or
    batch legitimately moves bf16 logits by a few hundredths."""
    tol = _tolerance(dtype)
    if dtype in (torch.float16, torch.bfloat16):
        return bool(((a - b).abs() <= tol * (1 + b.abs().max())).all())
    return bool(((a - b).abs() <= tol * (1 + b.abs())).all())


def _probe_capacity(model) -> int:
    """A cache longer than any window-like size of the config (capped), so a runner that misplaces a local
    attention band over a long cache fails the probe (GPT-Neo's local layers slice their band by key length)."""
    return 16 + max([w for w in local_attention_sizes(model) if w <= 8192] or [0])


def _own_generate_logits(model, seq: torch.Tensor, prompt_len: int, positions: bool = True) -> torch.Tensor:
    """Logits as the model's own generate() computes them: the prompt in one forward, then one token at a time
    on the model's own cache (positions=False: no position ids passed, the model derives its own)."""
    ids = torch.arange(seq.shape[1], device=seq.device)[None]
    extra = ((lambda lo, hi: {"position_ids": ids[:, lo:hi]}) if positions and accepts(model, "position_ids")
             else (lambda lo, hi: {}))
    name = cache_argument(model) or "past_key_values"
    out = model(input_ids=seq[:, :prompt_len], use_cache=True, **extra(0, prompt_len))
    logits, past = [out.logits[0]], returned_cache(out)
    # a recurrent cache's model drops the mask after the prompt in its own generate() (Mamba scales the block's
    # hidden states by it, so a full-length mask would broadcast): one row, nothing to mask
    mask = (lambda i: {}) if records_past(past) else (  # noqa: E731
        lambda i: {"attention_mask": torch.ones(1, i + 1, dtype=torch.long, device=seq.device)})
    for i in range(prompt_len, seq.shape[1]):
        out = model(input_ids=seq[:, i : i + 1], **{name: past}, use_cache=True, **extra(i, i + 1), **mask(i))
        logits.append(out.logits[0])
        past = returned_cache(out)
    return torch.cat(logits).float()


def _own_positions_differ(model) -> str | None:
    """Whether the model's own generate() feeds it positions other than 0, 1, 2, ... from the first real token
    (what every runner passes): a few greedy tokens from generate(), their raw logits against the same loop with
    explicit positions, and (when those differ) against the loop without position ids, which must then agree.
    XLM-RoBERTa-XL's prepare_inputs_for_generation derives them from the token content (from padding_idx + 1; a
    pad-id token does not advance them). None when they agree, when the difference lies elsewhere (a recurrent
    state) or when generate() cannot run on a bare prompt: the runner probes then decide."""
    special = [t for t in (getattr(model.config, n, None) for n in ("pad_token_id", "bos_token_id", "eos_token_id"))
               if isinstance(t, int)]
    normal = [i for i in range(3, 40) if i not in special]
    prompt = torch.tensor([normal[:6]], device=model.device)
    token = OWN_GENERATE.set(True)  # the model's own loop, never routed back to ours (patch.py)
    try:
        # everything on one config (transformers 5 logs a deprecation for a config plus generation kwargs); compile
        # off (transformers 4.5x compiles the forward for a static/hybrid cache config); special tokens suppressed
        # (a content-derived numbering skips pad-id tokens; the raw logits are unchanged)
        config = copy.deepcopy(model.generation_config)
        for key, value in dict(disable_compile=True, do_sample=False, max_new_tokens=3, min_new_tokens=3,
                               output_logits=True, return_dict_in_generate=True, pad_token_id=normal[0], num_beams=1,
                               suppress_tokens=special or None).items():
            setattr(config, key, value)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), generation_config=config)
        got = torch.cat(out.logits).float()
        seq, first = out.sequences[:, :-1], prompt.shape[1] - 1

        def matches(positions: bool) -> bool:
            ref = _own_generate_logits(model, seq, prompt.shape[1], positions)[first:]
            return ref.shape == got.shape and all(_agrees(a, b, model.dtype) for a, b in zip(got, ref))

        # differs with our positions, agrees when the model numbers them itself: else the difference is elsewhere
        # (a recurrent state, ...), and the runner probes say what
        if matches(True) or not matches(False):
            return None
    except Exception:  # noqa: BLE001 - a model its own generate() cannot run this way: the runner probes decide
        return None
    finally:
        OWN_GENERATE.reset(token)
    return ("its own generate() passes other position ids than 0, 1, 2, ... (it derives them from the token "
            "content or adds an offset), which optimum-uag's runners do not reproduce")


def _probe(model, cls) -> str | None:
    """Run a left-padded batch of 2 through a runner with a rollback that leaves a hole in one row, and compare
    every logit with what the model's own generate() loop computes for each row. None when they agree, else what went wrong."""
    config = model.config
    vocab = min(int(getattr(config, "vocab_size", 0) or 0) or 32, 1 << 15)
    # no special tokens: some models derive positions from where the pad token is (RoBERTa-style decoders)
    special = {getattr(config, n, None) for n in ("pad_token_id", "bos_token_id", "eos_token_id")}
    normal = torch.tensor([i for i in range(min(vocab, 64)) if i not in special] or [0])
    gen = torch.Generator().manual_seed(0)
    ids = lambda *shape: normal[torch.randint(0, len(normal), shape, generator=gen)].to(model.device)  # noqa: E731
    prompt, block1, block2, block3 = ids(2, 7), ids(2, 3), ids(2, 2), ids(2, 1)
    pad = torch.tensor([0, 2], device=model.device)
    # (tokens, start per row, how many of the block each row keeps)
    steps = [(prompt, [0, 0], [7, 7]), (block1, [7, 7], [1, 0]), (block2, [8, 7], [2, 2]), (block3, [10, 9], [1, 1])]
    def run(live_prefix: bool | None = None) -> tuple:
        runner = cls(model, 2, _probe_capacity(model), pad)
        if live_prefix is not None:
            runner.live_prefix = live_prefix
        return runner, [runner.forward(t, torch.tensor(s, device=model.device)) for t, s, _ in steps]

    try:
        runner, got = run()
        # the static runner on an eager CPU reads only the live prefix of its cache, and the whole width once a block
        # reaches its end: both must agree (GPT-Neo slices its local band by key length, right over a short prefix
        # and wrong past its window)
        whole = run(live_prefix=False)[1] if getattr(runner, "live_prefix", False) else None
    except Exception as err:  # noqa: BLE001 - any failure means "not this runner"
        return f"{type(err).__name__}: {str(err).splitlines()[0][:160] if str(err) else ''}"
    if whole is not None and not all(_agrees(a.nan_to_num(), b.nan_to_num(), model.dtype) for a, b in zip(got, whole)):
        return "logits differ between the cache's live prefix and its whole width"
    for row in range(2):
        seq, pairs = [], []  # the row's logical sequence, and (step, column) of each real token's logits
        for step, (tokens, _, keep) in enumerate(steps):
            first = int(pad[row]) if step == 0 else 0
            for col in range(first, tokens.shape[1]):
                pairs.append((step, col, len(seq) if col < keep[row] else None))
                if col < keep[row]:
                    seq.append(tokens[row, col])
        try:
            ref = _own_generate_logits(model, torch.stack(seq)[None], 7 - int(pad[row]))
        except Exception as err:  # noqa: BLE001
            return f"reference forward failed: {type(err).__name__}"
        # rejected tokens were computed after the same prefix as the next kept one would be: check kept ones
        for step, col, pos in pairs:
            if pos is None:
                continue
            a, b = got[step][row, col], ref[pos]
            if not torch.isfinite(b).all():  # a broken model (NaN weights): the decoding loop reports it
                continue
            if not _agrees(a, b, model.dtype):
                return f"logits differ from the model's own forward (max diff {float((a - b).abs().max()):.3g})"
    return None


def select_runner(model, strict: bool = True) -> str:
    """The runner kind for `model`: the first in RUNNERS whose probe matches the model's own forward; cached.

    strict=False (a draft): when none matches (a draft quantized with dynamic activation scales, a test
    double), the first that runs. Raises ValueError naming the model class when nothing fits."""
    cached = model_state(model).get("runner")
    if cached is not None and (cached[1] or not strict):
        return cached[0]
    config = getattr(model, "config", None)
    name = type(model).__name__
    if getattr(config, "is_encoder_decoder", False):
        raise ValueError(f"{name} is an encoder-decoder model; optimum-uag runs decoder-only causal LMs "
                         "(AutoModelForCausalLM) as target and assistant")
    failures, runs = {}, None
    with torch.inference_mode():
        positions = _own_positions_differ(model) if strict else None  # a draft's positions only move proposals
        if positions is not None:
            raise ValueError(f"{name} cannot be run by optimum-uag as a target: {positions}; use model.generate() "
                             "without an assistant for this model (as an assistant it is accepted)")
        for kind, cls in RUNNERS.items():
            failures[kind] = _probe(model, cls)
            if failures[kind] is None:
                model_state(model)["runner"] = (kind, True)
                return kind
            if runs is None and failures[kind].startswith(("logits differ", "reference")):
                runs = kind  # it ran; only its numbers disagree
    if not strict and runs is not None:
        model_state(model)["runner"] = (runs, False)
        return runs
    detail = "; ".join(f"{kind}: {why}" for kind, why in failures.items())
    raise ValueError(
        f"{name} cannot be run by optimum-uag: no runner reproduces its own forward with a rolled-back cache "
        f"({detail}). Target and assistant must be decoder-only transformers whose KV cache can be cut back "
        "(recurrent / state-space models: from transformers 5.25, which records their past states); use "
        "model.generate() without an assistant for this model"
    )


def runner_kind(model) -> str | None:
    """The runner kind chosen for `model` so far (None before its first assisted call)."""
    cached = model_state(model).get("runner")
    return cached[0] if cached else None


def make_runner(model, batch_size: int, capacity: int, pad: torch.Tensor, role: str = "target",
                packed: bool | None = None):
    """A runner for one model on CPU/CUDA, of the kind its capability probe chose; on a CPU the static runner's
    linears run on prepacked weights (runners/packed.py; packed=False turns it off)."""
    kind = select_runner(model, strict=role == "target")
    runner = RUNNERS[kind](model, batch_size, capacity, pad)
    if getattr(runner, "call", False) is None:
        pack = packed_weights(model, packed)
        if pack is not None:
            runner.call = PackedCall(model, pack)
    return runner


@dataclass
class RunnerPlan:
    """How one assisted call runs its models: the runner factory, fixed verify width, and EOS handling."""

    make_runner: Callable = make_runner  # (model, batch_size, capacity, pad, role=...) -> runner
    static_verify: bool = False  # pad every proposal to a fixed width (graph-compiled backends)
    ignore_eos: bool = False
    rounds: object = None  # start() / step() after each round / stop(): a backend's timer or profiler (Gaudi)


_HOOKS: list[Callable] = []


def register_plan_hook(hook: Callable) -> None:
    """hook(model, kwargs, generation_config) -> RunnerPlan | None; it pops the kwargs it owns. Idempotent."""
    if hook not in _HOOKS:
        _HOOKS.append(hook)


def plan_for(model, kwargs: dict, generation_config=None) -> RunnerPlan:
    """The first registered backend's plan for this model, else the CPU/CUDA plan (`cpu_packed_weights`: None =
    auto, False = off; runners/packed.py)."""
    packed = kwargs.pop("cpu_packed_weights", None)
    if packed not in (None, True, False):
        raise ValueError(f"cpu_packed_weights must be True, False or None (auto), got {packed!r}")
    for hook in _HOOKS:
        plan = hook(model, kwargs, generation_config)
        if plan is not None:
            return plan
    return RunnerPlan(make_runner=functools.partial(make_runner, packed=packed))
