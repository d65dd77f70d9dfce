"""Loading models for the CLI: local directories, Hub ids, GGUF, feature heads, INC FP8 checkpoints, devices."""
from __future__ import annotations

import os
from pathlib import Path

from .common import fail


def resolve_device(name: str, emulate_hpu: bool = False):
    """(torch device, the HPU emulator or None); on Gaudi (or emulated) also adapts transformers to optimum-habana
    first. The emulator (--emulate_hpu, a dry run on CPU) stays active for the rest of the process: the Gaudi model
    classes bind habana_frameworks when they are imported."""
    import torch

    from .. import gaudi
    from ..gaudi import device as hpu

    if emulate_hpu:
        if name not in ("auto", "hpu", "cpu"):
            fail(f"--emulate_hpu runs on the CPU; drop --device {name}")
        from ..testing.hpu_emulator import HPUEmulator  # the --emulate_hpu dry run only

        try:
            gaudi.check_versions()
        except ImportError as exc:
            fail(f"--emulate_hpu runs optimum-habana's Gaudi model classes: {exc}")
        emulator = HPUEmulator().__enter__()
        gaudi.enable()
        return torch.device("cpu"), emulator
    if name == "hpu":
        if not hpu.available():
            fail("--device hpu needs Intel Gaudi (habana_frameworks is not installed); add --emulate_hpu to "
                 "dry-run the Gaudi configuration on CPU, or use --device cpu")
        try:
            gaudi.enable()
        except ImportError as exc:
            fail(str(exc))
        return torch.device("hpu"), None
    if name == "cuda" and not torch.cuda.is_available():
        fail("--device cuda but no CUDA device is available; use --device cpu")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu"), None
    return torch.device(name), None


def resolve_model_name(name: str) -> str:
    """'smollm2' and embedded model names -> local directories; anything else is returned unchanged."""
    from ..models import SmolLM2Unavailable, embedded_models, smollm2

    if name.lower() in ("smollm2", "smollm2-135m-instruct"):
        try:
            return smollm2()
        except SmolLM2Unavailable as exc:
            fail(str(exc))
    embedded = embedded_models()
    if name in embedded and not Path(name).exists():
        return embedded[name]
    return name


def default_models(args) -> list[str]:
    """Fill in --model_name_or_path/--assistant_model when omitted: SmolLM2 + its cross-tokenizer draft, else the
    embedded tiny pair (with a note saying why). Returns the notes."""
    from ..models import SmolLM2Unavailable, embedded_models, smollm2, smollm2_available

    notes = []
    if args.model_name_or_path is None:
        try:
            if not smollm2_available() and os.environ.get("HF_HUB_OFFLINE") == "1":
                raise SmolLM2Unavailable("HF_HUB_OFFLINE=1")
            args.model_name_or_path = smollm2()
            args.default_smollm2 = True
        except SmolLM2Unavailable as exc:
            notes.append(f"SmolLM2-135M-Instruct is not available ({str(exc).splitlines()[0]}): running the embedded "
                         "tiny pair instead (python -c 'import optimum_uag.models as m; m.smollm2()' fetches it)")
            args.model_name_or_path = embedded_models()["target"]
    else:
        args.model_name_or_path = resolve_model_name(args.model_name_or_path)
    smol = _is_smollm2(args.model_name_or_path)
    shipped = embedded_models()
    if args.assistant_model is None:
        # SmolLM2: its feature head (the fastest draft shipped), plus the cross-tokenizer draft as a UAG row
        default = "smollm2_head" if smol and "smollm2_head" in shipped else (
            "smollm2_assistant_cross" if smol else "assistant")
        args.assistant_model = shipped.get(default, shipped["assistant"])
        if smol and args.uag_assistant_model is None and "smollm2_assistant_cross" in shipped and \
                default != "smollm2_assistant_cross":
            args.uag_assistant_model = shipped["smollm2_assistant_cross"]
    else:
        args.assistant_model = resolve_model_name(args.assistant_model)
    if args.uag_assistant_model is not None:
        args.uag_assistant_model = resolve_model_name(args.uag_assistant_model)
    if args.max_new_tokens is None:
        args.max_new_tokens = 128 if smol else 64
    if smol and not (args.prompt or args.prompt_file or args.dataset_name):
        args.default_chat_prompts = True
    return notes


def _is_smollm2(path: str) -> bool:
    from ..models import smollm2_path

    try:
        return Path(path).resolve() == smollm2_path().resolve()
    except OSError:
        return False


def load(path: str | None, default: str, device, dtype, args=None, on_meta=None):
    """Model + left-padding tokenizer from a local directory or a Hub id (from_pretrained's own arguments).
    `on_meta(path, model_kwargs)`: a multi-card loader that returns the sharded model, or None to load here."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ..models import embedded_models

    path = resolve_model_name(path) if path else embedded_models()[default]
    hub = dict(revision=getattr(args, "model_revision", "main"), token=getattr(args, "token", None),
               trust_remote_code=getattr(args, "trust_remote_code", False))
    model_kw = dict(hub, torch_dtype=dtype)
    if getattr(args, "gguf_file", None):
        model_kw["gguf_file"] = args.gguf_file
    if getattr(args, "attn_implementation", None):
        model_kw["attn_implementation"] = args.attn_implementation
    tok_kw = dict(hub, trust_remote_code=getattr(args, "trust_remote_code_tokenizer", False) or hub["trust_remote_code"])
    if getattr(args, "gguf_file", None):
        tok_kw["gguf_file"] = args.gguf_file
    local = Path(path).is_dir()
    if not local and not _in_hub_cache(path, hub["revision"]) and not _hub_reachable():
        fail(f"could not fetch '{path}' from the Hugging Face Hub (no network: its host does not resolve); download "
             f"it where there is a network (huggingface-cli download {path} --local-dir DIR) and pass DIR, or pass a "
             "local directory")
    try:
        model = on_meta(path, model_kw) if on_meta is not None else None
        if model is None:
            model = AutoModelForCausalLM.from_pretrained(path, **model_kw).to(device).eval()
        tokenizer = AutoTokenizer.from_pretrained(path, **tok_kw)
    except (OSError, ValueError, ImportError) as exc:
        if local:
            fail(f"could not load '{path}': {str(exc).splitlines()[0]}")
        fail(f"could not fetch '{path}' from the Hugging Face Hub ({type(exc).__name__}: "
             f"{str(exc).splitlines()[0][:120]}); without a network, download it where there is one "
             f"(huggingface-cli download {path} --local-dir DIR) and pass DIR, or pass a local directory")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return model, tokenizer, path


def _in_hub_cache(repo_id: str, revision: str) -> bool:
    """True when the Hub cache already holds this model's config (then no network is needed)."""
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(repo_id, "config.json", revision=revision), str)
    except Exception:  # noqa: BLE001 - an id that is not a valid repo name
        return False


def _hub_reachable() -> bool:
    """False when the Hub's host does not resolve (offline), so a Hub id fails at once, not after ~45 s of retries."""
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return False
    try:
        socket.getaddrinfo(urlparse(constants.ENDPOINT).hostname, 443)
        return True
    except OSError:
        return False


def load_inc_quantized(path: str, device, args):
    """An FP8 checkpoint saved by Intel Neural Compressor, loaded as optimum-habana's run_generation.py does:
    neural_compressor.torch.quantization.load(..., format="huggingface", device="hpu")."""
    from transformers import AutoTokenizer

    try:
        from neural_compressor.torch.quantization import load as inc_load
    except ImportError:
        fail("--load_quantized_model_with_inc needs Intel Neural Compressor: pip install 'optimum-uag[quant]'")
    path = resolve_model_name(path) if path else fail("--load_quantized_model_with_inc needs --model_name_or_path")
    hub = dict(revision=args.model_revision, token=args.token, trust_remote_code=args.trust_remote_code)
    model = inc_load(model_name_or_path=path, format="huggingface", device=device.type, **hub).eval()  # as upstream
    tokenizer = AutoTokenizer.from_pretrained(path, **hub)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return model, tokenizer, path


def maybe_quantize(model, path: str | None, flag: str):
    """Quantize with INC as the JSON says (FP8 measure/quantize, RTN); errors name the flag and the fix."""
    if not path:
        return model
    from ..quantization import quantize_model

    try:
        return quantize_model(model, path)
    except (OSError, ValueError, RuntimeError) as exc:
        fail(f"{flag}={path}: quantization failed: {exc}")


def upstream_generation_config(model, args):
    """The generation config optimum-habana's run_generation.py builds (utils.setup_generation_config) for its
    target-only loop: every upstream flag applied, so the baseline runs as the same upstream command would."""
    import copy

    from optimum.habana.checkpoint_utils import model_is_optimized

    config = copy.deepcopy(model.generation_config)
    optimized = model_is_optimized(model.config)
    config.use_cache = True
    config.static_shapes = optimized
    config.bucket_size = args.bucket_size if optimized else -1
    config.reuse_cache = args.reuse_cache
    config.ignore_eos = args.ignore_eos
    for flag in ("bucket_internal", "trim_logits", "attn_softmax_bf16", "limit_hpu_graphs", "clear_hpu_graphs_cache",
                 "reduce_recompile", "use_flex_attention", "use_flash_attention", "flash_attention_recompute",
                 "flash_attention_causal_mask", "flash_attention_fast_softmax", "attn_batch_split",
                 "decode_attn_batch_split"):
        setattr(config, flag, getattr(args, flag))
    if config.reduce_recompile and config.bucket_size <= 0:
        fail("--reduce_recompile needs --bucket_size > 0 (as in optimum-habana)")
    config.valid_sequence_lengths = None
    return config


def load_assistant(path: str, device, dtype, args=None):
    """A draft: a feature-head directory (the target's own features; no tokenizer of its own), else a model + its
    tokenizer as `load` reads them. Returns (draft, tokenizer or None, path)."""
    from ..engine.drafters import is_feature_head, load_feature_head

    path = resolve_model_name(path)
    if Path(path).is_dir() and is_feature_head(path):
        try:
            return load_feature_head(path).to(device=device, dtype=dtype), None, path
        except (OSError, ValueError) as exc:
            fail(f"could not load the feature head '{path}': {str(exc).splitlines()[0]}")
    return load(path, "assistant", device, dtype, args)
