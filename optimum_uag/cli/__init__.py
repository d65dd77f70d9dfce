"""The command line: `optimum-uag generate | tune | train-draft` (examples/run_generation.py runs `generate`)."""
from __future__ import annotations

import sys

USAGE = """usage: optimum-uag generate [flags]     run assisted generation (optimum-uag generate --help)
       optimum-uag tune [flags]         rank drafts and K on your prompts (optimum-uag tune --help)
       optimum-uag train-draft [flags]  train a feature draft head for a target (optimum-uag train-draft --help)"""


def main(argv=None) -> int:
    """Dispatch to a command; flags alone mean `generate`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[0] if argv else None
    if command == "tune":
        from .tune import tune_main

        return tune_main(argv[1:])
    if command == "train-draft":
        from .train_draft import train_draft_main

        return train_draft_main(argv[1:])
    if command in (None, "-h", "--help"):
        print(USAGE)
        return 0
    from .generate import generate_main

    return generate_main(argv[1:] if command == "generate" else argv)


def build_parser():
    from .flags import build_parser as build

    return build()


def upstream_generation_config(model, args):
    from .loading import upstream_generation_config as build

    return build(model, args)


def generate_main(argv=None) -> int:
    from .generate import generate_main as run

    return run(argv)
