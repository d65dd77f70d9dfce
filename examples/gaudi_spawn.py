"""Launch a script on N cards the way optimum-habana's examples/gaudi_spawn.py does (DeepSpeed launcher).

    python examples/gaudi_spawn.py --use_deepspeed --world_size 8 examples/run_generation.py --bf16 ...

On Gaudi the ranks talk over hccl; on a CPU-only machine the same command runs N processes over gloo (the
launcher-set LOCAL_SIZE and OMP_NUM_THREADS=1 are what make that work on few cores).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--world_size", type=int, default=1, help="number of processes (cards)")
    parser.add_argument("--use_deepspeed", action="store_true", help="launch with the DeepSpeed launcher")
    parser.add_argument("--use_mpi", action="store_true", help="optimum-habana's mpirun mode (not supported here)")
    parser.add_argument("--master_port", type=int, default=29500)
    parser.add_argument("training_script", help="the script to run on every rank")
    parser.add_argument("training_script_args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.use_mpi:
        parser.error("--use_mpi is not supported; use --use_deepspeed (or a single process with --world_size 1)")
    if args.world_size < 1:
        parser.error("--world_size must be >= 1")
    if args.world_size == 1 and not args.use_deepspeed:
        command = [sys.executable, args.training_script, *args.training_script_args]
    else:
        if not args.use_deepspeed:
            parser.error("--world_size > 1 needs --use_deepspeed (the tensor-parallel target is sharded by DeepSpeed)")
        command = [sys.executable, "-m", "deepspeed.launcher.runner", "--num_gpus", str(args.world_size),
                   "--master_port", str(args.master_port), "--no_local_rank", args.training_script,
                   *args.training_script_args]
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")  # N ranks on shared cores: one thread each
    print("launching:", " ".join(command), flush=True)
    return subprocess.call(command, env=env)


if __name__ == "__main__":
    raise SystemExit(main())
