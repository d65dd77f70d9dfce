import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import pytest
import torch

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long tests (still run in CI)")


@pytest.fixture(scope="session")
def embedded():
    """The embedded family, loaded once: {name: (model, tokenizer)}."""
    from optimum_uag import load_embedded

    return {name: load_embedded(name) for name in ("target", "assistant", "assistant_same_tokenizer")}


@pytest.fixture(scope="session")
def prompts():
    from optimum_uag import eval_prompts

    return eval_prompts()
