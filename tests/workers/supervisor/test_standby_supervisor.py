"""The agent's standby supervisor (agent/standby.py, node/standby.py): started ahead with its
imports done, it becomes a launch's supervisor exactly as one started for it (the agent's environment
as it is at the hand-over, the run directory as working directory, log file and command line), and it
ends with the agent when nobody took it."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import psutil
import pytest
from supervisor_support import free_port
from torchyard.agent.runs import launch_node, run_dir
from torchyard.agent.standby import StandbySupervisor
from torchyard.supervisor.argv import PACKAGE_PARENT


def wait_result(directory: Path, timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    while not (directory / "result.json").exists():
        assert time.monotonic() < deadline, (directory / "supervisor.log").read_text()[-3000:]
        time.sleep(0.1)
    return json.loads((directory / "result.json").read_text())


@pytest.fixture
def standby(tmp_path: Path, code_root: Path, monkeypatch):
    # What a supervisor needs from the agent's environment in these tests (the agent's own is its user's).
    monkeypatch.setenv("TORCHYARD_CODE_ROOT", str(code_root))
    monkeypatch.setenv("PYTHONPATH", str(PACKAGE_PARENT))
    made = StandbySupervisor(tmp_path / "standby")
    made.maintain()
    try:
        yield made
    finally:
        made.close()


def test_a_launch_taken_by_the_standby_runs_as_a_supervisor_started_for_it(tmp_path, code_root, standby, job_launch,
                                                                          monkeypatch):
    waiting = standby._proc  # noqa: SLF001
    assert waiting is not None and waiting.poll() is None
    monkeypatch.setenv("TORCHYARD_SET_AFTER_THE_STANDBY", "yes")  # the agent's environment changed since
    (code_root / "scripts" / "env_probe.py").write_text(
        "import os, time\nprint('seen:', os.environ.get('TORCHYARD_SET_AFTER_THE_STANDBY'), os.getcwd(), flush=True)\n"
        "time.sleep(3)\n")
    launch = job_launch(master_port=free_port(), launcher="none", entrypoint="scripts/env_probe.py")
    started = launch_node(tmp_path / "agent", launch, publish=lambda event: None, standby=standby)
    assert started == {"started": True, "pid": waiting.pid, "standby": True}
    directory = run_dir(tmp_path / "agent", launch.job_id, launch.attempt, launch.node_rank)
    # Once it has read the hand-over (its imports may still be running), it shows the run directory.
    deadline = time.monotonic() + 30
    while (cmdline := psutil.Process(waiting.pid).cmdline())[1:4] != ["-m", "torchyard.supervisor", str(directory)]:
        assert time.monotonic() < deadline, cmdline[:5]
        time.sleep(0.05)
    result = wait_result(directory)
    assert result["state"] == "completed", result
    assert result["supervisor_pid"] == waiting.pid
    assert "node 0: completed" in (directory / "supervisor.log").read_text()
    # Its ranks saw the agent's environment of the hand-over, not the one the standby started with.
    rank_log = next(directory.rglob("stdout.log")).read_text()
    assert f"seen: yes {directory}" in rank_log, rank_log
    assert standby.take(tmp_path / "elsewhere") is None  # taken: none ready until the next maintain()
    standby.maintain()
    assert standby._proc is not None and standby._proc.pid != waiting.pid  # noqa: SLF001


def test_an_untaken_standby_ends_when_the_agents_end_of_its_pipe_closes(standby):
    waiting = standby._proc  # noqa: SLF001
    assert waiting is not None
    standby.close()
    assert waiting.wait(timeout=10) == 0
    assert not os.path.exists(f"/proc/{waiting.pid}/cmdline") or waiting.poll() is not None
