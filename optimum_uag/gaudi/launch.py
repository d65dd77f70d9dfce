"""Run a script with optimum-uag's engine behind `generate(assistant_model=...)` on Gaudi.

    python -m optimum_uag.gaudi.launch run_generation.py --model_name_or_path T --assistant_model D \\
        --use_hpu_graphs --use_kv_cache --bf16 --batch_size 2 --max_new_tokens 128

runs optimum-habana's own, unmodified `examples/text-generation/run_generation.py` (or any script) as if started
with `python run_generation.py ...`: `optimum_uag.gaudi.enable()` first, then the script, in this process. The
routing survives the script's own `adapt_transformers_to_gaudi()` (its setup_env). Multi-card (DeepSpeed): give
this file's path where the launcher expects a script, e.g.
`deepspeed --num_gpus 8 $(python -c "import optimum_uag.gaudi.launch as m; print(m.__file__)") run_generation.py ...`.
"""
from __future__ import annotations

import os
import runpy
import sys

USAGE = "usage: python -m optimum_uag.gaudi.launch SCRIPT.py [SCRIPT ARGUMENTS...]"


def _flag(argv: list[str], name: str) -> str | None:
    """The value of `--name VALUE` or `--name=VALUE` in a script's arguments (the last one), or None."""
    value = None
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith(name + "="):
            value = arg.split("=", 1)[1]
    return value


def main(argv: list[str] | None = None) -> int:
    """Enable optimum-uag on Gaudi, then run SCRIPT with its arguments as __main__."""
    argv = list(sys.argv[1:] if argv is None else argv)
    while argv and argv[0].startswith(("--local_rank", "--local-rank")):  # launchers put it first; the script reads it
        argv.append(argv.pop(0))
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE + "\n\n" + __doc__.split("\n\n")[1], file=sys.stderr)
        return 0 if argv else 2
    script = argv[0]
    if not os.path.isfile(script):
        print(f"optimum_uag.gaudi.launch: no script {script!r}\n{USAGE}", file=sys.stderr)
        return 2
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or ".") == here:  # started by path: our modules would shadow others
        sys.path.pop(0)
    from optimum_uag import distributed
    from optimum_uag.gaudi import enable

    # what the script's setup_env sets, before enable() imports habana_frameworks (too late after it)
    distributed.prepare_env()
    os.environ.setdefault("EXPERIMENTAL_WEIGHT_SHARING", "FALSE")
    try:
        enable()
    except ImportError as exc:
        print(f"optimum_uag.gaudi.launch: {exc}", file=sys.stderr)
        return 2
    from optimum_uag import patch

    # upstream's run_generation.py passes generate() no tokenizers: a UAG pair gets them from its two paths
    patch.set_launch_paths(_flag(argv, "--tokenizer_name_or_path") or _flag(argv, "--model_name_or_path"),
                           _flag(argv, "--assistant_model"))
    sys.argv = [script, *argv[1:]]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))  # the script's own imports (its utils.py)
    runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
