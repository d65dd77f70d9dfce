"""`optimum-uag generate` (and examples/run_generation.py): parse -> load models -> build inputs -> run the methods
side by side (target-only, optimum-uag with each draft, transformers' assisted generation) -> report."""
from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from .. import distributed
from ..upstream_flags import ignored
from .common import fail
from .flags import build_parser, check_args
from .harness import Method, device_sync, run_side_by_side
from .loading import (default_models, load, load_assistant, load_inc_quantized, maybe_quantize, resolve_device,
                      upstream_generation_config)
from .prompts import apply_chat, read_prompts
from .report import build_report, print_report


@dataclass
class Setup:
    """What run_generate loaded: models, tokenizers, device, and notes for the report."""

    args: object
    device: object = None
    emulator: object = None
    model: object = None
    tokenizer: object = None
    target_path: str = ""
    drafts: dict = field(default_factory=dict)  # row name -> (draft, its tokenizer or None, path)
    notes: list = field(default_factory=list)
    world_size: int = 1
    target_on_meta: bool = False  # multi-card: built on meta, each rank loaded its shard (optimum-habana's way)
    gaudi_call: dict = field(default_factory=dict)  # generate() arguments of optimum-habana (both loops)
    gaudi_kwargs: dict = field(default_factory=dict)  # Gaudi options of optimum-uag's loop
    baseline_config: object = None


def _gaudi_installed() -> bool:
    """True where the Intel Gaudi software is installed (habana_frameworks can be imported)."""
    try:
        return importlib.util.find_spec("habana_frameworks") is not None
    except ValueError:  # a module without a spec (the HPU emulator's stand-in): not an installation
        return False


def parse(argv) -> tuple[object, bool]:
    args = build_parser().parse_args(argv)
    if args.device == "auto" and not args.emulate_hpu and _gaudi_installed():
        args.device = "hpu"  # optimum-habana's default device, so its command lines run unchanged
    on_gaudi = args.device == "hpu" or args.emulate_hpu
    if args.flash_attention_fast_softmax is None:  # upstream: on with --use_flash_attention unless given
        args.flash_attention_fast_softmax = bool(args.use_flash_attention)
    if args.ignore_eos is None:  # optimum-habana's run_generation.py default (True) for Gaudi command lines
        args.ignore_eos = on_gaudi
    if args.warmup is None:  # optimum-habana's default on Gaudi; one pass elsewhere (the emulator included)
        args.warmup = 3 if args.device == "hpu" and not args.emulate_hpu else 1
    check_args(args, on_gaudi)
    return args, on_gaudi


def model_dtype(bf16: bool, world_size: int, device) -> "torch.dtype":
    """The models' dtype as upstream's utils.initialize_model: bf16 with --bf16 or under DeepSpeed (world size > 1);
    here under DeepSpeed on Gaudi only (CPU ranks stay fp32: no native bf16 there)."""
    import torch

    return torch.bfloat16 if bf16 or (world_size > 1 and device.type == "hpu") else torch.float32


def load_models(args, notes: list) -> Setup:
    """Target and drafts on the device (multi-card: loaded on the CPU, sharded, then moved); quantized as asked."""
    import torch

    from ..quantization import quant_kind, read_quant_config

    setup = Setup(args=args, notes=notes)
    quant_config = os.environ.get("QUANT_CONFIG")
    for path in (quant_config, args.assistant_quant_config):
        if path:
            try:
                quant_kind(read_quant_config(path))
            except (OSError, ValueError) as exc:
                fail(str(exc))
    torch.manual_seed(args.seed)
    distributed.prepare_env()  # before resolve_device imports habana_frameworks
    setup.device, setup.emulator = resolve_device(args.device, args.emulate_hpu)
    if setup.device.type == "hpu" and (quant_config or args.assistant_quant_config or args.load_quantized_model_with_inc):
        from ..gaudi import device as hpu

        hpu.set_env()  # as optimum-habana's setup_device, before any model reaches the HPU
    setup.world_size = ws = distributed.world_size()
    dtype = model_dtype(args.bf16, ws, setup.device)
    if ws > 1:
        if args.emulate_hpu:
            fail("--emulate_hpu runs one process; drop it for a multi-card run (DeepSpeed over gloo runs on CPU)")
        distributed.init(setup.device)
    elif args.shard_assistant:
        fail("--shard_assistant needs a multi-card launch (deepspeed --num_gpus N ...)")
    # multi-card: sharded from the CPU; quantized on an accelerator: quantized on the CPU, then moved (as upstream's
    # setup_model: setup_quantization before .to(device), which lets a model that only fits in FP8 load at all)
    quantized_on_cpu = ws == 1 and setup.device.type != "cpu" and bool(quant_config or args.assistant_quant_config)
    load_device = torch.device("cpu") if ws > 1 or quantized_on_cpu else setup.device
    if args.load_quantized_model_with_inc:
        setup.model, setup.tokenizer, setup.target_path = load_inc_quantized(args.model_name_or_path, setup.device, args)
    else:
        on_meta = None
        if ws > 1 and not getattr(args, "gguf_file", None):
            def on_meta(path, model_kw):  # as optimum-habana: built on meta, each rank loads only its shard
                model = distributed.load_on_meta(path, dtype, model_kw, setup.device)
                setup.target_on_meta = model is not None
                return model
        setup.model, setup.tokenizer, setup.target_path = load(args.model_name_or_path, "target", load_device, dtype,
                                                               args, on_meta=on_meta)
    if not args.no_assistant and (not args.prompt_lookup_num_tokens or args.assistant_model_given):
        setup.drafts["optimum_uag"] = _load_draft(args, args.assistant_model, load_device, dtype)
    if not args.no_assistant and args.uag_assistant_model:
        setup.drafts["optimum_uag_uag"] = _load_draft(args, args.uag_assistant_model, load_device, dtype)
    _check_heads(setup)
    if ws > 1:
        _shard(setup, dtype)
    setup.model = maybe_quantize(setup.model, quant_config, "QUANT_CONFIG")
    for name, (draft, tok, path) in list(setup.drafts.items()):
        if hasattr(draft, "generation_config"):  # a model, not a feature head
            setup.drafts[name] = (maybe_quantize(draft, args.assistant_quant_config, "--assistant_quant_config"),
                                  tok, path)
    if quantized_on_cpu:
        setup.model = setup.model.to(setup.device)
        setup.drafts = {name: (draft.to(setup.device), tok, path) for name, (draft, tok, path) in setup.drafts.items()}
    return setup


def _check_heads(setup: Setup) -> None:
    """A feature head trained for another target: one line naming the fix, before anything runs."""
    from ..engine.drafters import FeatureHead
    from ..engine.drafters.feature import check_head_matches

    for draft, _, path in setup.drafts.values():
        if isinstance(draft, FeatureHead):
            try:
                check_head_matches(draft, setup.model)
            except ValueError as exc:
                fail(f"--assistant_model {path}: {exc}")


def _load_draft(args, path, device, dtype):
    draft, tok, path = load_assistant(path, device, dtype, args)
    if args.assistant_tokenizer and tok is not None and path == args.assistant_model:
        from transformers import AutoTokenizer

        try:
            tok = AutoTokenizer.from_pretrained(args.assistant_tokenizer, token=args.token)
        except (OSError, ValueError) as exc:
            fail(f"could not load --assistant_tokenizer {args.assistant_tokenizer}: {str(exc).splitlines()[0]}")
    return draft, tok, path


def _shard(setup: Setup, dtype) -> None:
    try:
        if not setup.target_on_meta:  # (else already sharded while loading)
            setup.model = distributed.shard(setup.model, dtype, "target")
        for name, (draft, tok, path) in list(setup.drafts.items()):
            if setup.args.shard_assistant and hasattr(draft, "generation_config"):
                draft = distributed.shard(draft, dtype, "assistant")
            setup.drafts[name] = (draft.to(setup.device), tok, path)
    except ValueError as exc:
        fail(str(exc))
    setup.model = setup.model.to(setup.device)


def prepare_gaudi(setup: Setup) -> None:
    """Gaudi knobs as call arguments, graph-wrapped Gaudi models, and the upstream baseline's generation config."""
    args = setup.args
    if not (args.device == "hpu" or args.emulate_hpu):
        return
    from ..gaudi.device import graph_wrapped
    from ..gaudi.runner import cache_mechanism

    setup.gaudi_call = dict(lazy_mode=os.environ.get("PT_HPU_LAZY_MODE", "1") != "0", hpu_graphs=args.use_hpu_graphs)
    setup.gaudi_kwargs = dict(ignore_eos=args.ignore_eos, use_flash_attention=args.use_flash_attention,
                              flash_attention_recompute=args.flash_attention_recompute, static_shapes=True,
                              reuse_cache=True, attn_softmax_bf16=args.attn_softmax_bf16,
                              flash_attention_fast_softmax=bool(args.flash_attention_fast_softmax),
                              bucket_size=args.bucket_size, limit_hpu_graphs=args.limit_hpu_graphs,
                              clear_hpu_graphs_cache=args.clear_hpu_graphs_cache)
    setup.baseline_config = upstream_generation_config(setup.model, args)
    models = [("target", setup.model)] + [("assistant", d) for d, _, _ in setup.drafts.values()
                                          if hasattr(d, "generation_config")]
    for name, m in models:
        if setup.emulator is not None:
            setup.emulator.name(m, name)
        if args.use_hpu_graphs and cache_mechanism(m) is not None:
            graph_wrapped(m)
        elif args.use_hpu_graphs:
            setup.notes.append(f"the {name} ({type(m).__name__}) is not an optimum-habana Gaudi model: it runs "
                               "outside HPU graphs (a captured graph would freeze its cache object)")


def build_inputs(setup: Setup) -> tuple[list, str]:
    """Prompts -> (chat template) -> batches of the target tokenizer's ids on the device."""
    args, tokenizer, notes = setup.args, setup.tokenizer, setup.notes
    prompts, source = read_prompts(args)
    prompts, templated = apply_chat(tokenizer, prompts, args.use_chat_template, args.chat_template)
    no_ops = ignored(args)
    if no_ops and setup.gaudi_kwargs:
        notes.append(f"accepted for compatibility with optimum-habana: {', '.join(no_ops)}; applied to the "
                     "target-only baseline (optimum-habana's own loop, as its run_generation.py), no effect on "
                     "optimum-uag's loop")
    elif no_ops:
        notes.append(f"accepted for compatibility with optimum-habana, no effect here: {', '.join(no_ops)}")
    if args.batch_size > len(prompts):
        notes.append(f"batch_size {args.batch_size} > {len(prompts)} prompts: prompts are repeated to fill the batch")
        prompts = (prompts * args.batch_size)[: args.batch_size]
    batches = [prompts[i : i + args.batch_size] for i in range(0, len(prompts), args.batch_size)]
    batches = [b for b in batches if len(b) == args.batch_size] or batches[:1]
    encode_kw = dict(return_tensors="pt", padding=True, return_token_type_ids=False,
                     add_special_tokens=not templated)  # a chat template writes its own special tokens
    if args.max_input_tokens > 0:  # as optimum-habana: one static prompt shape (pad to the limit, cut the left)
        encode_kw.update(truncation=True, max_length=args.max_input_tokens, padding="max_length")
        tokenizer.truncation_side = "left"
    return [tokenizer(b, **encode_kw).to(setup.device) for b in batches], source


def generation_kwargs(setup: Setup) -> dict:
    args, tokenizer = setup.args, setup.tokenizer
    kw = dict(max_new_tokens=args.max_new_tokens, do_sample=args.do_sample, pad_token_id=tokenizer.pad_token_id,
              **setup.gaudi_call)
    if args.ignore_eos and not setup.gaudi_kwargs:
        kw["eos_token_id"] = None
    if args.do_sample:
        kw.update(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                  num_return_sequences=args.num_return_sequences)
    if args.bad_words:  # as optimum-habana: each word's ids without special tokens
        kw["bad_words_ids"] = [tokenizer.encode(w, add_special_tokens=False) for w in args.bad_words]
    return kw


def build_methods(setup: Setup, gen_kwargs: dict) -> dict:
    """The rows to run side by side: target-only first, then optimum-uag with each draft, then transformers'."""
    from .. import assisted_generate

    args, model, tokenizer = setup.args, setup.model, setup.tokenizer
    baseline_kwargs = {}
    if args.torch_compile:  # like with like: transformers' own compiled static-cache loop
        from ..runners.compile import transformers_compile_config

        baseline_kwargs = dict(cache_implementation="static", compile_config=transformers_compile_config(setup.device))
    if setup.gaudi_kwargs:  # optimum-habana's run_generation.py: its generation config, every upstream flag applied
        baseline_kwargs["generation_config"] = setup.baseline_config
    if "generation_config" not in baseline_kwargs:
        # one explicit generation config (transformers 4.55 spends ~6% more per call re-deriving it from keywords)
        baseline_kwargs = _explicit_config(model, {**gen_kwargs, **baseline_kwargs})
        gen_kwargs_baseline = {}
    else:
        gen_kwargs_baseline = gen_kwargs
    methods = {"target_only": Method(lambda enc: model.generate(**enc, **gen_kwargs_baseline, **baseline_kwargs))}
    _add_packed_reference(setup, methods, gen_kwargs_baseline, baseline_kwargs)
    engine = dict(num_assistant_tokens_schedule=args.num_assistant_tokens_schedule,
                  assistant_confidence_threshold=args.assistant_confidence_threshold, **setup.gaudi_kwargs)
    if args.prompt_lookup_num_tokens:
        engine["prompt_lookup_num_tokens"] = args.prompt_lookup_num_tokens
    if args.draft_policy != "auto":
        engine["draft_policy"] = args.draft_policy
    if args.draft_tree != "auto":
        engine["draft_tree"] = args.draft_tree == "on"
    for name in ("tree_depth", "tree_top_k", "tree_nodes"):
        if getattr(args, name) is not None:
            engine[name] = getattr(args, name)
    if args.torch_compile:
        engine["torch_compile"] = True

    def ours(draft, draft_tok, extra):
        cross = draft_tok is not None and not _same(tokenizer, draft_tok)
        pair = dict(tokenizer=tokenizer, assistant_tokenizer=draft_tok if cross else None)
        if args.num_assistant_tokens is not None:
            extra = dict(extra, num_assistant_tokens=args.num_assistant_tokens)
        options = {**engine, **extra}
        return Method(lambda enc: assisted_generate(model, draft, enc["input_ids"], enc["attention_mask"], **pair,
                                                    **gen_kwargs, **options), engine=True)

    if not setup.drafts and args.prompt_lookup_num_tokens:
        methods["optimum_uag"] = ours(None, None, {})
    for name, (draft, draft_tok, _) in setup.drafts.items():
        methods[name] = ours(draft, draft_tok, {} if name == "optimum_uag" else {"prompt_lookup_num_tokens": None})
    _add_transformers_baseline(setup, methods, gen_kwargs)
    return methods


def _explicit_config(model, kwargs: dict) -> dict:
    """generate() keywords as {"generation_config": the model's config updated with them, **what it does not hold}."""
    import copy

    config = copy.deepcopy(model.generation_config)
    rest = config.update(**kwargs)
    return {"generation_config": config, **rest}


def _add_packed_reference(setup: Setup, methods: dict, gen_kwargs: dict, baseline_kwargs: dict) -> None:
    """On a CPU, the target alone on the prepacked weights optimum-uag's runners use (runners/packed.py): the share
    of the speedup that comes from the kernels, apart from the drafting."""
    from ..runners.packed import packed_weights

    if setup.args.torch_compile or setup.gaudi_kwargs or setup.device.type != "cpu" or setup.world_size > 1:
        return
    pack = packed_weights(setup.model)
    if pack is None:
        return

    def packed_target_only(enc):
        with pack:
            return setup.model.generate(**enc, **gen_kwargs, **baseline_kwargs)

    methods["target_only_packed"] = Method(packed_target_only)


def _add_transformers_baseline(setup: Setup, methods: dict, gen_kwargs: dict) -> None:
    from ..engine.config import DEFAULT_NUM_ASSISTANT_TOKENS

    args = setup.args
    name = "optimum_uag_uag" if "optimum_uag_uag" in setup.drafts else "optimum_uag"
    if not args.compare_baseline and name != "optimum_uag_uag":
        return
    if name not in setup.drafts or not hasattr(setup.drafts[name][0], "generation_config"):
        return
    draft, draft_tok, _ = setup.drafts[name]
    if setup.gaudi_kwargs:
        setup.notes.append("optimum-habana's own assisted generation fails on Gaudi models (tuple-cache .crop(), "
                           "static-shape mismatches): transformers baseline skipped")
        return
    if args.batch_size > 1:
        setup.notes.append("transformers' assisted generation supports batch size 1 only: baseline skipped")
        return
    kw = dict(gen_kwargs, assistant_model=draft)
    if draft_tok is not None and not _same(setup.tokenizer, draft_tok):
        kw.update(tokenizer=setup.tokenizer, assistant_tokenizer=draft_tok)
    # transformers reads K and its schedule from the assistant's generation_config (a num_assistant_tokens keyword
    # of generate() is ignored for the assistant): set there for the call, as the optimum-uag row runs
    if args.num_assistant_tokens is None and args.draft_policy != "fixed" and args.num_assistant_tokens_schedule == "constant":
        # optimum-uag's row chooses its length (adaptive): transformers runs its own default policy (20 tokens,
        # stopped where the draft's confidence falls below 0.4), whatever the assistant's checkpoint says
        from transformers import GenerationConfig

        defaults = getattr(GenerationConfig, "_get_default_generation_params", None)  # transformers 5
        defaults = defaults() if defaults is not None else GenerationConfig().to_dict()
        schedule = {key: defaults[key] for key in ("num_assistant_tokens", "num_assistant_tokens_schedule",
                                                   "assistant_confidence_threshold")}
        why = "transformers' own default policy, as optimum-uag's row chooses its own"
    else:
        k = args.num_assistant_tokens or DEFAULT_NUM_ASSISTANT_TOKENS
        schedule = dict(num_assistant_tokens=k, num_assistant_tokens_schedule=args.num_assistant_tokens_schedule,
                        assistant_confidence_threshold=(args.assistant_confidence_threshold
                                                        if args.num_assistant_tokens_schedule == "confidence" else 0.0))
        why = "set for its calls, as optimum-uag's row drafts"
    setup.notes.append("transformers assisted: assistant_model.generation_config " + ", ".join(
        f"{key}={value}" for key, value in schedule.items()) + f" ({why})")

    def transformers_assisted(enc):
        config = draft.generation_config
        saved = {key: getattr(config, key, None) for key in schedule}
        for key, value in schedule.items():
            setattr(config, key, value)
        try:
            return setup.model.generate(**enc, **kw)
        finally:
            for key, value in saved.items():
                setattr(config, key, value)

    methods["transformers_assisted"] = Method(transformers_assisted, baseline_of=name,
                                              optional="transformers' own assisted generation (a comparison row)")


def _same(a, b) -> bool:
    from ..engine.drafters.translation import same_vocabulary

    return a is b or same_vocabulary(a, b)


def run_generate(argv=None) -> dict:
    args, _ = parse(argv)
    args.assistant_model_given = args.assistant_model is not None
    notes = default_models(args)
    if args.batch_size < 1 or args.max_new_tokens < 1 or args.n_iterations < 1:
        fail("--batch_size, --max_new_tokens and --n_iterations must be >= 1")
    setup = load_models(args, notes)
    prepare_gaudi(setup)
    encoded, source = build_inputs(setup)
    gen_kwargs = generation_kwargs(setup)
    methods = build_methods(setup, gen_kwargs)
    eos = None if args.ignore_eos else setup.model.generation_config.eos_token_id
    eos_ids = set(eos if isinstance(eos, list) else [eos]) if eos is not None else set()
    result = run_side_by_side(methods, encoded, args.warmup, args.n_iterations, args.seed, device_sync(setup.device),
                              eos_ids, setup.emulator, greedy=not args.do_sample, notes=setup.notes)
    return build_report(setup, result, source, encoded)


def generate_main(argv=None) -> int:
    try:
        report = run_generate(argv)
    finally:
        distributed.shutdown()
    if distributed.rank() != 0:
        return 0
    print_report(report)
    out_dir = report["args"].get("output_dir")
    if out_dir:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / "results.json").write_text(json.dumps(report, indent=2, default=str))
        print(f"wrote {Path(out_dir) / 'results.json'}")
    return 0
