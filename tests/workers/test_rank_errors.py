"""A rank whose script raises leaves its exception for the node's supervisor (rank_main.note_error):
type, message, the innermost frame of the user's own code (not the library that raised), the step it
last reported; the supervisor reports the node's first one (supervisor/errors.py first_error)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from torchyard import protocol
from torchyard.supervisor.errors import first_error

SCRIPT = textwrap.dedent("""
    import json
    from torchyard.sdk import events

    def step(batch):
        return json.loads(batch)  # the standard library raises; the user's frame is this line

    for s in range(1, 8):
        events.report(s)
    step("{not json")
""")


def run_rank(tmp_path: Path, rank: int, script: str = SCRIPT) -> subprocess.CompletedProcess:
    (tmp_path / "train.py").write_text(script)
    env = {**os.environ, protocol.ENV_RUN_DIR: str(tmp_path / "run"), "RANK": str(rank)}
    (tmp_path / "run").mkdir(exist_ok=True)
    return subprocess.run([sys.executable, "-m", "torchyard.rank_main", "train.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)


def test_a_raising_rank_leaves_its_exception_its_frame_and_its_step(tmp_path):
    done = run_rank(tmp_path, 3)
    assert done.returncode == 1 and "JSONDecodeError" in done.stderr
    error = json.loads((tmp_path / "run" / "error-3.json").read_text())
    assert error == {"type": "json.decoder.JSONDecodeError",
                     "message": "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
                     "frame": "train.py:6 in step", "rank": 3, "step": 7}


def test_a_script_that_exits_leaves_nothing(tmp_path):
    done = run_rank(tmp_path, 0, "import sys\nsys.exit(3)\n")
    assert done.returncode == 3 and not list((tmp_path / "run").iterdir())


def test_the_node_reports_the_first_exception_raised_on_it(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    first = {"type": "ValueError", "message": "bad batch", "frame": "train.py:6 in step", "rank": 5, "step": 7}
    (run / "error-5.json").write_text(json.dumps(first))
    later = time.time() + 5
    (run / "error-4.json").write_text(json.dumps({**first, "type": "RuntimeError", "rank": 4}))
    os.utime(run / "error-4.json", (later, later))  # its collective broke after rank 5 raised
    (run / "error-6.json").write_text("{half written")
    assert first_error(run) == first
    assert first_error(tmp_path) is None
