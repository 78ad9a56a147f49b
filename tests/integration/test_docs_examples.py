"""The documentation's runnable examples (`<!-- run: NAME -->` above a block in README.md or docs/),
each run as a reader would run it, against the shared production-shaped stack: a shell block by bash
in a fresh directory, a Python block as a script in a fresh project directory, with the CLI on the
PATH and TORCHYARD_SERVER and TORCHYARD_TOKEN set. The documented address, http://127.0.0.1:8000
(`make run`'s), is the stack's. Nothing else is passed through a shell: only the example itself.

tests/docs/test_docs_examples.py holds every other block to a `<!-- not-run: REASON -->`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from docs.examples import Example, examples

from .stack import ADMIN

BIN = Path(sys.executable).parent
DOCUMENTED_SERVER = "http://127.0.0.1:8000"
TIMEOUT_S = 120

RUNNABLE = [example for example in examples() if example.run is not None]

# What each example's output must show, beyond its exit status 0 (a name missing here: the status alone).
EXPECT = {
    "sign-in": ["local-0", "local-1"],
    "first-job": ["rank 3 of 4", "== job completed"],
    "api-machines": ['"ok"', "local-0"],
    "function-call": ["'rank': 3"],
    "cli-listings": ["mlp_ddp"],
    "machines": ["local-0", "local-1"],
}
# Files an example leaves in its directory.
EXPECT_FILES = {
    "certs": ["var/certs/ca.pem", "var/certs/server.pem", "var/certs/server-key.pem"],
}


def run_example(stack, example: Example, where: Path) -> subprocess.CompletedProcess:
    text = example.text.replace(DOCUMENTED_SERVER, stack.base)
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", TORCHYARD_SERVER=stack.base,
               TORCHYARD_TOKEN=stack.token, TORCHYARD_PASSWORD=ADMIN[1], PYTHONUNBUFFERED="1")
    if example.language == "python":
        # A project of its own: the function's folder is what torchyard.fn packs and uploads.
        (where / ".torchyardignore").write_text("")
        (where / "example.py").write_text(text)
        argv = [sys.executable, "example.py"]
    else:
        argv = ["bash", "-e", "-o", "pipefail", "-c", text]
    return subprocess.run(argv, cwd=where, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)


def test_some_examples_are_runnable():
    assert RUNNABLE, "no example of the docs is marked <!-- run: NAME -->"


@pytest.mark.parametrize("example", RUNNABLE, ids=[example.run for example in RUNNABLE])
def test_the_documented_example_runs(pg_stack, example: Example, tmp_path):
    result = run_example(pg_stack, example, tmp_path)
    shown = f"{example.where} ({example.run}) exited {result.returncode}\n--- stdout\n{result.stdout[-4000:]}\n" \
            f"--- stderr\n{result.stderr[-4000:]}"
    assert result.returncode == 0, shown
    for expected in EXPECT.get(example.run or "", []):
        assert expected in result.stdout, f"{expected!r} not in the output of {shown}"
    for path in EXPECT_FILES.get(example.run or "", []):
        assert (tmp_path / path).is_file(), f"{path} not written by {shown}"
