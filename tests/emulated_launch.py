"""`python -m optimum_uag.gaudi.launch` under the HPU emulator, for tests: python tests/emulated_launch.py SCRIPT ..."""
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from optimum_uag.testing.hpu_emulator import HPUEmulator  # noqa: E402

if __name__ == "__main__":
    from optimum_uag.gaudi.launch import main

    with HPUEmulator():
        code = main(sys.argv[1:])
    sys.exit(code)
