"""The embedded, trained model family shipped as package data."""
from importlib import resources

_NAMES = ("target", "assistant", "assistant_same_tokenizer")


def embedded_models() -> dict[str, str]:
    """Return local directories of the embedded target, cross-tokenizer assistant and same-tokenizer assistant."""
    root = resources.files(__name__)
    paths = {}
    for name in _NAMES:
        path = root / name
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
