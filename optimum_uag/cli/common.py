"""What every CLI command shares: the one-line error exit."""
from __future__ import annotations

import sys


def fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)
