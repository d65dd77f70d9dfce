#!/usr/bin/env python
"""Assisted generation with any draft model; flags as optimum-habana's examples/text-generation/run_generation.py.

    python examples/run_generation.py                      # embedded pair: target + cross-tokenizer draft
    python examples/run_generation.py --model_name_or_path T --assistant_model D --max_new_tokens 128 --compare_baseline
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from optimum_uag.cli import generate_main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(generate_main())
