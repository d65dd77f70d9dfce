"""The embedded, trained model family shipped as package data."""
from importlib import resources

from .smollm2 import SmolLM2Unavailable, cache_root, smollm2, smollm2_available, smollm2_path

_NAMES = ("target", "assistant", "assistant_same_tokenizer")
# Drafts for SmolLM2-135M-Instruct: two distilled models (examples/distill_smollm2.py; the first shares its
# tokenizer, the second has its own, for Universal Assisted Generation) and a feature head over its hidden states
# (optimum-uag train-draft; docs/models.md).
_SMOLLM2_DRAFTS = ("smollm2_assistant", "smollm2_assistant_cross", "smollm2_head")


def embedded_models() -> dict[str, str]:
    """Local directories of the embedded models: the tiny trained family and the drafts distilled from SmolLM2."""
    root = resources.files(__name__)
    paths = {}
    for name in _NAMES + _SMOLLM2_DRAFTS:
        path = root / name
        if name in _SMOLLM2_DRAFTS and not path.is_dir():
            continue  # only while they are being (re)built by examples/distill_smollm2.py
        if not (path / "config.json").is_file():
            raise FileNotFoundError(
                f"embedded model '{name}' is missing at {path}; reinstall optimum-uag or rebuild it with "
                "examples/train_embedded_models.py"
            )
        paths[name] = str(path)
    return paths


def eval_prompts() -> list[str]:
    """Held-out code prompts (from standard-library files never seen in training) shipped with the models."""
    import json

    return json.loads((resources.files(__name__) / "prompts.json").read_text(encoding="utf-8"))


def load_embedded(name: str = "assistant", dtype=None):
    """Load (model, tokenizer) of one embedded model offline: 'target', 'assistant' or 'assistant_same_tokenizer'."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = embedded_models()[name]
    model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=dtype or torch.float32, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    return model.eval(), tokenizer


def chat_prompts() -> list[str]:
    """Held-out chat requests for SmolLM2-Instruct (code, explanations, translation, lists, JSON, writing)."""
    from .prompt_sets import heldout_chat_prompts

    return heldout_chat_prompts()
