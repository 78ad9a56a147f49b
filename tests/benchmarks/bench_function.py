"""Benchmark `function`: calling a Python function on the cluster against `torchyard run` of the
equivalent script, in the same run.

Both sides run 2 nodes x 2 processes of the same body (join a gloo group, one barrier, leave) on a
real stack with two local agents, from the same project directory, driven from this process:
- function: `torchyard.fn(body).distribute(workers=2, nproc_per_node=2)(...)`, from the call to the
  list of four return values in hand (pickling, the payload bundle, the job, following its stream,
  fetching and unpickling every rank's result);
- script: `torchyard run --nnodes 2 --nproc-per-node 2 body.py` (the CLI's own main()), from the
  call to its return once the job has completed.
Both upload an unchanged project (one HEAD) after a warm-up of each; their logs go to a buffer.
Median of 5 each, sides alternating. The function's overhead is the difference of the medians (the
target: under 0.3 s) and their ratio.

    make bench BENCH=function
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import launch_common as lc  # noqa: E402

ROUNDS = 5
BODY = '''
import torch.distributed as dist


def body():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    dist.barrier()
    dist.destroy_process_group()
    return rank


if __name__ == "__main__":
    body()
'''


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="bench-function-"))
    project = work / "project"
    project.mkdir()
    (project / "body.py").write_text(BODY)
    sys.path.insert(0, str(project))
    try:
        with lc.bench_stack(work) as stack:
            os.environ.update(TORCHYARD_SERVER=stack.base, TORCHYARD_TOKEN=stack.token)
            import body  # the project's module: the function is pickled by reference, as a user's would be
            import torchyard as ty
            from torchyard.cli import main as cli

            remote = ty.fn(body.body, project_dir=project).distribute(framework="pytorch", workers=2, nproc_per_node=2)

            def function_side() -> float:
                started = time.perf_counter()
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                    results = remote()
                elapsed = time.perf_counter() - started
                assert results == [0, 1, 2, 3], results
                return elapsed

            def script_side() -> float:
                started = time.perf_counter()
                with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(io.StringIO()):
                    code = cli(["run", "--dir", str(project), "--nnodes", "2", "--nproc-per-node", "2",
                                "--max-restarts", "0", str(project / "body.py")])
                elapsed = time.perf_counter() - started
                assert code == 0, out.getvalue()[-2000:]
                return elapsed

            function_side(), script_side()  # warm-up: uploads, the machines' bundle caches
            ours, theirs = [], []
            for round_no in range(ROUNDS):
                sides = (function_side, script_side) if round_no % 2 == 0 else (script_side, function_side)
                for side in sides:
                    (ours if side is function_side else theirs).append(side())
                print(f"round {round_no + 1}/{ROUNDS}: torchyard run {theirs[-1]:.2f} s, function {ours[-1]:.2f} s",
                      flush=True)
        base = lc.med(theirs)
        print(f"\nfunction: a 2 x 2 function that returns at once, call -> results in hand, against `torchyard run` "
              f"of the same body; {ROUNDS} rounds alternating, {os.cpu_count()} cores; seconds")
        print(lc.summary_header())
        print(lc.summary_row("torchyard run (script)", theirs, base))
        print(lc.summary_row("function: call -> results", ours, base))
        print(lc.summary_row("overhead (same round)", [o - t for o, t in zip(ours, theirs, strict=True)]))
        print(f"\noverhead of the function over the script: {lc.med(ours) - base:+.2f} s (median difference; "
              f"target < 0.30 s)")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
