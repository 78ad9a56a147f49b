"""Run the benchmarks: every tests/benchmarks/bench_*.py, or the ones named.

    python tests/benchmarks/run.py                      # all of them (`make bench`)
    python tests/benchmarks/run.py checkpoint           # bench_checkpoint.py (`make bench BENCH=checkpoint`)
    python tests/benchmarks/run.py bundle -- --flag     # arguments after `--` go to every bench run

Each bench runs as its own process with this Python, from the repository root, with the tests'
DATABASE_URL and REDIS_URL (the Makefile's defaults unless set), and prints its own table. A bench
that fails does not stop the others: the exit status is non-zero when any of them failed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
# The Makefile's TEST_DATABASE_URL / TEST_REDIS_URL, for a run outside make.
DEFAULT_ENV = {
    "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/torchyard",
    "REDIS_URL": "redis://127.0.0.1:6379/9",
}


def discover() -> dict[str, Path]:
    """Every bench by its short name: bench_checkpoint.py is `checkpoint`."""
    return {p.stem.removeprefix("bench_"): p for p in sorted(HERE.glob("bench_*.py"))}


def select(names: list[str], benches: dict[str, Path]) -> list[Path]:
    if not names:
        return list(benches.values())
    # `checkpoint`, `bench_checkpoint` and `bench_checkpoint.py` all name the same bench.
    wanted = [Path(n).name.removesuffix(".py").removeprefix("bench_") for n in names]
    unknown = [n for n in wanted if n not in benches]
    if unknown:
        raise SystemExit(f"run.py: no bench named {', '.join(unknown)}; there are: {', '.join(benches)}")
    return [benches[n] for n in wanted]


def main(argv: list[str]) -> int:
    names, extra = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    chosen = select([n for n in names if n], discover())
    env = dict(os.environ)
    for key, value in DEFAULT_ENV.items():
        env.setdefault(key, value)
    results: list[tuple[str, int, float]] = []
    for path in chosen:
        print(f"\n=== {path.name} ===", flush=True)
        started = time.monotonic()
        # Output goes straight to this terminal: each bench prints its own table as it goes.
        code = subprocess.call([sys.executable, str(path), *extra], cwd=ROOT, env=env)
        results.append((path.name, code, time.monotonic() - started))
    print(f"\n{'bench':<28}{'result':<14}{'seconds':>9}")
    for name, code, seconds in results:
        print(f"{name:<28}{'ok' if code == 0 else f'FAILED ({code})':<14}{seconds:>9.1f}")
    return 1 if any(code for _, code, _ in results) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
