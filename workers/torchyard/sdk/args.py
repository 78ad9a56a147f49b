"""The command-line flags every Torchyard recipe understands, so the control plane (which reads
`--steps` for progress) and tests (`--step-sleep` to make a job last) can rely on them."""

from __future__ import annotations

import argparse
import os


def add_training_arguments(parser: argparse.ArgumentParser, *, steps: int | None = 300, log_every: int = 50,
                           steps_help: str = "total optimizer steps") -> None:
    """Add --steps, --step-sleep, --checkpoint-every, --report-every, --log-every, --seed, --threads.

    ``steps=None`` leaves ``args.steps`` None when --steps is not given, for a script that works its
    length out otherwise (the built-in recipes: from the job's epochs)."""
    parser.add_argument("--steps", type=int, default=steps, help=steps_help)
    parser.add_argument("--step-sleep", type=float, default=0.0, help="extra pause per step (demos, tests)")
    parser.add_argument("--checkpoint-every", type=int, default=None,
                        help="override checkpointing.every_n_steps (0: never)")
    parser.add_argument("--report-every", type=int, default=10, help="steps between metric reports")
    parser.add_argument("--log-every", type=int, default=log_every, help="steps between log lines")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--threads",
        type=int,
        default=int(os.environ.get("OMP_NUM_THREADS") or 1),
        help="CPU threads per process (default: OMP_NUM_THREADS, else 1)",
    )
