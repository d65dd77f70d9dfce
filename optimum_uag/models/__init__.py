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
