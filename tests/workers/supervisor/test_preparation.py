"""The node's preparation (supervisor/preparation.py) on its own: nothing to do for a recipe, a
missing volume refused first, a code bundle made into a fresh working directory through the
machine's cache, and a preparation step (a plain child process) streamed line by line as the node's
log and ended, with its children, by a stop."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from launches import make_launch
from supervisor_support import next_job_id, stream_events
from torchyard.bundles import pack_directory
from torchyard.supervisor.output_pump import OutputPump
from torchyard.supervisor.preparation import Preparation, Prepared
from torchyard.supervisor.publisher import EventPublisher, connect
from torchyard.supervisor.states import StopRequested
from torchyard.supervisor.volumes import VolumeError


class Node:
    """A Preparation of one node, its log published to a real Redis, its heartbeats and
    announcements counted; a tick raises StopRequested (a stop arrived) once `stop_when()`."""

    def __init__(self, tmp_path: Path, redis_url: str, name: str = "run", **launch) -> None:
        self.launch = make_launch(job_id=next_job_id(), **launch)
        self.run_dir = tmp_path / name
        self.run_dir.mkdir()
        self.publisher = EventPublisher(self.launch, connect(redis_url))
        self.pump = OutputPump(self.publisher, lambda line: line, rank_start=self.launch.rank_start, keep=10,
                               on_torchrun_line=lambda line: None, on_step=lambda *step: None)
        self.ticks = 0
        self.stop_when: Callable[[], bool] = lambda: False
        self.announced: list[str] = []
        self.preparation = Preparation(self.launch, self.run_dir, self.pump, python=sys.executable, tick=self.tick,
                                       announce=self.announced.append, poll_interval=0.01)
        self.redis_url = redis_url

    def tick(self) -> None:
        self.ticks += 1
        if self.stop_when():
            raise StopRequested()

    def said(self) -> list[tuple[str, str]]:
        assert self.publisher.flush(budget_s=5)
        return [(e["source"], e["line"]) for e in stream_events(self.redis_url, self.launch.job_id)]


def test_a_recipe_needs_no_preparation(tmp_path, redis_url):
    node = Node(tmp_path, redis_url)
    assert node.preparation.run() == Prepared(node.run_dir, sys.executable)
    assert node.announced == [] and node.said() == []


def test_a_missing_volume_fails_the_node_before_any_work(tmp_path, redis_url):
    missing = tmp_path / "nowhere"
    node = Node(tmp_path, redis_url, code={"bundle": "a" * 64, "size": 1, "uri": "file:///nowhere.tar.zst"},
                volumes=[{"name": "data", "path": str(missing), "mount_path": "data"}])
    with pytest.raises(VolumeError, match=f"volume data: {missing} does not exist"):
        node.preparation.run()
    assert node.announced == []


def test_a_bundle_becomes_a_fresh_working_directory_once_fetched_and_the_next_node_finds_it_cached(
        tmp_path, redis_url):
    project = tmp_path / "project"
    (project / "pkg").mkdir(parents=True)
    (project / "main.py").write_text("print('hi')\n")
    (project / "pkg" / "util.py").write_text("X = 1\n")
    packed = pack_directory(project, tmp_path / "bundle.tar.zst")
    code = {"bundle": packed.sha256, "size": packed.size, "uri": packed.path.as_uri()}
    first = Node(tmp_path, redis_url, "first", code=code, cache_dir=str(tmp_path / "cache"))

    prepared = first.preparation.run()
    assert prepared == Prepared(first.run_dir / "work", sys.executable)
    assert (prepared.workdir / "main.py").read_text() == "print('hi')\n"
    assert (prepared.workdir / "pkg" / "util.py").read_text() == "X = 1\n"
    assert first.announced == [f"preparing code bundle {packed.sha256[:12]}"] and first.ticks >= 2
    lines = [line for source, line in first.said()]
    assert any(line.startswith(f"working directory from code bundle {packed.sha256[:12]}") for line in lines)

    second = Node(tmp_path, redis_url, "second", code=code, cache_dir=str(tmp_path / "cache"))
    assert second.preparation.run().workdir == second.run_dir / "work"
    assert ("prepare", f"code bundle {packed.sha256[:12]} is in this machine's cache (verified by stat: 2 files)") in (
        second.said())


def test_a_step_is_streamed_line_by_line_as_the_nodes_log_and_the_next_step_does_not_repeat_it(tmp_path, redis_url):
    node = Node(tmp_path, redis_url)
    step = "import sys\nfor i in range(50): print(f'step one {i}', flush=True)\nprint('oops', file=sys.stderr)"
    assert node.preparation._run_step([sys.executable, "-c", step], tmp_path) == 0
    # A step that names pip is pip's to the reader of the log.
    pip_like = [sys.executable, "-c", "import sys; print('Collecting', sys.argv[1]); sys.exit(2)", "pip"]
    assert node.preparation._run_step(pip_like, tmp_path) == 2
    assert node.said() == [("prepare", f"step one {i}") for i in range(50)] + [
        ("prepare", "oops"), ("pip", "Collecting pip")]
    assert [r["line"] for r in node.pump.last_lines(started=False)][-2:] == ["oops", "Collecting pip"]


def test_a_stop_during_a_step_kills_the_step_and_its_children(tmp_path, redis_url):
    node = Node(tmp_path, redis_url)
    # The step starts a child of its own (as pip starts builds), says its pid, then both wait.
    step = ("import subprocess, sys, time\n"
            "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
            "print(child.pid, flush=True)\n"
            "time.sleep(60)\n")
    node.stop_when = lambda: any(line.isdigit() for _, line in node.said())
    started = time.monotonic()
    with pytest.raises(StopRequested):
        node.preparation._run_step([sys.executable, "-c", step], tmp_path)
    assert time.monotonic() - started < 10
    [child_pid] = [int(line) for _, line in node.said() if line.isdigit()]
    deadline = time.monotonic() + 5
    while running(child_pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not running(child_pid)


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
