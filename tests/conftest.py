import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# the default draft tree stays DEFAULT_TREE (a CPU's measured choice, engine/loop.py _device_tree, is tested on
# its own in test_tree.py: measured on the tiny test models it could differ from run to run)
os.environ.setdefault("OPTIMUM_UAG_DEVICE_TREE", "0")

import pytest
import torch

torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long tests (still run in CI)")
    config.addinivalue_line("markers", "gaudi: runs optimum-habana's Gaudi classes under the HPU emulator (last)")


def pytest_collection_modifyitems(config, items):
    """Gaudi tests last: adapt_transformers_to_gaudi() patches transformers for the rest of the process."""
    items.sort(key=lambda item: item.get_closest_marker("gaudi") is not None)


@pytest.fixture(scope="session")
def embedded():
    """The embedded family, loaded once: {name: (model, tokenizer)}."""
    from optimum_uag import load_embedded

    return {name: load_embedded(name) for name in ("target", "assistant", "assistant_same_tokenizer")}


@pytest.fixture(scope="session")
def prompts():
    from optimum_uag import eval_prompts

    return eval_prompts()
