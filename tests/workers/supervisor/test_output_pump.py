"""The output pump (supervisor/output_pump.py) on its own: a plain child process writes where
torchrun puts a rank's output and reports through the SDK's socket, the pump publishes what it
said to a real Redis, masked, with the global rank, in order."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from launches import make_launch
from supervisor_support import next_job_id, stream_events
from torchyard import protocol
from torchyard.supervisor.event_socket import EventSocket
from torchyard.supervisor.output_pump import OutputPump, secret_masker
from torchyard.supervisor.publisher import EventPublisher, connect
from torchyard.supervisor.tail import FileTail, RankLogTailer


class Pumped:
    """An OutputPump for node 1 (global ranks from 2) of a fresh job, publishing to `redis_url`,
    with what it handed the supervisor's callbacks."""

    def __init__(self, redis_url: str, *, max_buffer: int = 50_000, secrets: dict[str, str] | None = None) -> None:
        self.launch = make_launch(job_id=next_job_id(), node_rank=1, nproc_per_node=2)
        self.publisher = EventPublisher(self.launch, connect(redis_url), max_buffer=max_buffer)
        self.torchrun_lines: list[str] = []
        self.steps: list[tuple[int, int, int | None]] = []
        self.pump = OutputPump(self.publisher, secret_masker(secrets or {}), rank_start=self.launch.rank_start,
                               keep=3, on_torchrun_line=self.torchrun_lines.append,
                               on_step=lambda *step: self.steps.append(step))
        self.redis_url = redis_url

    def published(self) -> list[dict]:
        assert self.publisher.flush(budget_s=5)
        return stream_events(self.redis_url, self.launch.job_id)


def rank_files(log_dir: Path, local_rank: int) -> tuple[Path, Path]:
    """Where torchrun --redirects 3 puts a local rank's stdout and stderr."""
    folder = log_dir / "torchyard-7-2_abc" / "attempt_0" / str(local_rank)
    folder.mkdir(parents=True)
    return folder / "stdout.log", folder / "stderr.log"


def run_rank(log_dir: Path, local_rank: int, code: str) -> int:
    """A plain child process with its stdout and stderr in a rank's files; its exit code."""
    stdout, stderr = rank_files(log_dir, local_rank)
    with open(stdout, "wb") as out, open(stderr, "wb") as err:
        return subprocess.run([sys.executable, "-c", code], stdout=out, stderr=err, timeout=30).returncode


@pytest.fixture
def pumped(redis_url: str):
    made = Pumped(redis_url, secrets={"API_KEY": "hunter2"})
    yield made
    made.pump.close()


def test_a_ranks_lines_are_published_in_order_with_its_global_rank_and_secrets_masked(pumped, tmp_path):
    log_dir = tmp_path / "torchrun"
    pumped.pump.attach(tailer=RankLogTailer(log_dir, 2), socket=EventSocket(tmp_path / "events.sock"),
                       torchrun_tail=None, ray_logs=None)
    code = ("import sys\n"
            "for i in range(300): print(f'out {i}')\n"
            "print('token is hunter2', file=sys.stderr)\n"
            "print('last words', file=sys.stderr)\n")
    assert run_rank(log_dir, 1, code) == 0
    pumped.pump.drain(final=True)

    lines = [e for e in pumped.published() if e["type"] == protocol.LOG]
    out = [e["line"] for e in lines if e["stream"] == "stdout"]
    assert out == [f"out {i}" for i in range(300)]
    err = [e["line"] for e in lines if e["stream"] == "stderr"]
    assert err == ["token is ***", "last words"]
    assert {(e["rank"], e["local_rank"], e["source"]) for e in lines} == {(3, 1, "worker")}
    assert pumped.pump.last_line == {3: "out 299"}  # each file is read in turn: stderr, then stdout
    # A failure quotes the workers' stderr first, the newest `keep` lines of it.
    assert [r["line"] for r in pumped.pump.last_lines(started=True)] == ["token is ***", "last words"]


def test_sdk_reports_become_events_and_a_metrics_step_reaches_the_stall_watch(pumped, tmp_path):
    socket_path = tmp_path / "events.sock"
    pumped.pump.attach(tailer=RankLogTailer(tmp_path / "torchrun", 2), socket=EventSocket(socket_path),
                       torchrun_tail=None, ray_logs=None)
    code = ("import json, socket, sys\n"
            "sdk = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\n"
            "for report in ({'type': 'metric', 'rank': 2, 'step': 5, 'total_steps': 10, 'loss': 0.25},\n"
            "               {'type': 'state', 'rank': 2, 'status': 'completed'},\n"
            "               {'type': 'checkpoint', 'rank': 3, 'step': 5, 'uri': 'file:///ckpt'},\n"
            "               {'type': 'metric', 'rank': True, 'step': 6, 'loss': 0.2}):\n"
            "    sdk.sendto(json.dumps(report).encode(), sys.argv[1])\n"
            "sdk.sendto(b'not json', sys.argv[1])\n")
    subprocess.run([sys.executable, "-c", code, str(socket_path)], check=True, timeout=30)
    pumped.pump.drain()

    events = pumped.published()
    assert [(e["type"], e["rank"], e.get("step")) for e in events] == [
        (protocol.METRIC, 2, 5), (protocol.CHECKPOINT, 3, 5), (protocol.METRIC, None, 6)]
    assert events[0]["loss"] == 0.25 and events[1]["uri"] == "file:///ckpt"
    # A state is the supervisor's to say, never a rank's; only a rank's own step feeds the stall watch.
    assert pumped.steps == [(2, 5, 10)]
    assert set(pumped.pump.heard_at) == {2, 3}


def test_torchruns_own_lines_go_to_the_supervisor_and_explain_a_failure_when_no_rank_said_anything(pumped, tmp_path):
    torchrun_log = tmp_path / "torchrun.log"
    pumped.pump.attach(tailer=RankLogTailer(tmp_path / "torchrun", 2), socket=EventSocket(tmp_path / "events.sock"),
                       torchrun_tail=FileTail(torchrun_log), ray_logs=None)
    with open(torchrun_log, "wb") as out:
        code = "import sys; print('failed to bind port'); print('hunter2 ChildFailedError', file=sys.stderr); sys.exit(1)"
        assert subprocess.run([sys.executable, "-c", code], stdout=out, stderr=subprocess.STDOUT,
                              timeout=30).returncode == 1
    pumped.pump.drain(final=True)

    assert pumped.torchrun_lines == ["failed to bind port", "*** ChildFailedError"]
    assert [(e["source"], e["line"]) for e in pumped.published()] == [
        ("torchrun", "failed to bind port"), ("torchrun", "*** ChildFailedError")]
    assert [r["line"] for r in pumped.pump.last_lines(started=True)] == pumped.torchrun_lines


def test_before_the_ranks_start_only_the_preparations_lines_explain_a_failure(pumped):
    pumped.pump.prepare_line("Collecting numpy")
    pumped.pump.prepare_line("ERROR: no version of hunter2", source="pip")
    pumped.pump.supervisor_line("preparing with hunter2")

    assert [(e["source"], e["stream"], e["line"]) for e in pumped.published()] == [
        ("prepare", "stdout", "Collecting numpy"), ("pip", "stdout", "ERROR: no version of ***"),
        ("supervisor", "stderr", "preparing with ***")]
    assert [r["line"] for r in pumped.pump.last_lines(started=False)] == ["Collecting numpy", "ERROR: no version of ***"]
    assert pumped.pump.last_lines(started=True) == []


def test_draining_to_the_end_publishes_a_flood_larger_than_the_buffer_in_order_and_beats_meanwhile(redis_url, tmp_path):
    made = Pumped(redis_url, max_buffer=500)
    log_dir = tmp_path / "torchrun"
    made.pump.attach(tailer=RankLogTailer(log_dir, 2), socket=EventSocket(tmp_path / "events.sock"),
                     torchrun_tail=None, ray_logs=None)
    try:
        assert run_rank(log_dir, 0, "for i in range(5000): print(f'line {i}')") == 0
        made.pump.drain()
        # The buffer's room, not the file, bounds a read: the rest is read once some was sent.
        assert not made.pump.more_to_read()
        assert made.publisher.flush(budget_s=5) and made.pump.more_to_read()
        beats = []
        made.pump.drain_to_the_end(heartbeat=lambda: beats.append(1), heartbeat_interval=0.0, give_up_after=10,
                                   poll_interval=0.01)
        assert [e["line"] for e in made.published()] == [f"line {i}" for i in range(5000)]
        assert beats and not made.pump.more_to_read()
    finally:
        made.pump.close()
