"""How a rank ends and what is done about one that does not (torchyard/rank_main.py,
supervisor/linger.py, supervisor/stall.py SilenceWatch), on real processes: a plain DDP script run
through rank_main ends every time; a rank that outlives every other one idle is ended once its grace
is over, one that computes is not; a rank blocked without a word is silent, one that sleeps, computes
or prints is only quiet."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from torchyard import protocol
from torchyard.node.proctree import is_alive
from torchyard.supervisor.linger import LingerWatch, _innermost_native_frame, end_lingering
from torchyard.supervisor.stall import SilenceWatch, blocked_in_kernel

PLAIN_DDP = Path(__file__).resolve().parents[2] / "integration" / "job_exits" / "plain_ddp.py"
WORKERS = Path(__file__).resolve().parents[3] / "workers"

IDLE = "import threading; print('up', flush=True); threading.Event().wait()"
SLEEPS = "import time; print('up', flush=True); time.sleep(600)"
COMPUTES = "print('up', flush=True)\nwhile True: sum(range(10000))"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def spawn():
    started: list[subprocess.Popen] = []

    def start(code: str) -> psutil.Process:
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        started.append(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
        return psutil.Process(proc.pid)

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


def run_world(script: Path, world: int, *args: str, timeout: float = 60) -> list[int | None]:
    """`world` ranks of `script` through rank_main on loopback, as torchrun would start them; each
    one's exit code, None for a rank still alive after `timeout` (then killed)."""
    port = free_port()
    procs = []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), OMP_NUM_THREADS="1", PYTHONPATH=str(WORKERS))
        procs.append(subprocess.Popen([sys.executable, "-u", "-m", "torchyard.rank_main", str(script), *args],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    codes: list[int | None] = []
    deadline = time.monotonic() + timeout
    for proc in procs:
        try:
            codes.append(proc.wait(timeout=max(1.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            codes.append(None)
            proc.kill()
            proc.wait()
    return codes


def test_a_plain_ddp_script_run_through_rank_main_ends():
    # As a cold torchrun rank runs it; the warm pool's ten runs in a row are in warm/test_warm_pool.py.
    assert [run_world(PLAIN_DDP, 2) for _ in range(3)] == [[0, 0]] * 3


def test_rank_main_gives_the_script_what_a_plain_python_would(tmp_path):
    script = tmp_path / "sub" / "probe.py"
    script.parent.mkdir()
    script.write_text("import json, sys\nprint(json.dumps({'argv': sys.argv, 'path0': sys.path[0], 'name': __name__,"
                      " 'file': __file__}))\nraise SystemExit(7)\n")
    env = dict(os.environ, PYTHONPATH=str(WORKERS))
    done = subprocess.run([sys.executable, "-u", "-m", "torchyard.rank_main", str(script), "--lr", "0.1"], env=env,
                          capture_output=True, text=True, cwd=tmp_path, timeout=60)
    plain = subprocess.run([sys.executable, "-u", str(script), "--lr", "0.1"], capture_output=True, text=True,
                           cwd=tmp_path, timeout=60)
    assert done.returncode == plain.returncode == 7
    assert json.loads(done.stdout) == json.loads(plain.stdout)
    failing = tmp_path / "fails.py"
    failing.write_text("def f():\n    raise ValueError('no')\nf()\n")
    done = subprocess.run([sys.executable, "-u", "-m", "torchyard.rank_main", str(failing)], env=env,
                          capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 1
    assert done.stderr.startswith("Traceback (most recent call last):\n  File \"" + str(failing))
    assert done.stderr.rstrip().endswith("ValueError: no") and "runpy" not in done.stderr


def write_peers(run_dir: Path, statuses: list[str]) -> None:
    nodes = [{"node_rank": i, "host": "127.0.0.1", "machine": f"m{i}", "status": s} for i, s in enumerate(statuses)]
    (run_dir / protocol.PEERS_FILE).write_text(json.dumps({"version": len(nodes), "nodes": nodes}))


def test_a_rank_idle_after_every_other_rank_exited_0_is_due_after_its_grace(tmp_path, spawn):
    watch = LingerWatch(2.0, nnodes=2, node_rank=1, local_ranks=2, run_dir=tmp_path)
    done = spawn(IDLE)
    stuck = spawn(IDLE)
    watch.see(2, done)
    watch.see(3, stuck)
    done.kill()
    done.wait()
    now = time.monotonic()
    assert watch.check(now, failed=False) == []  # the other node has not completed
    write_peers(tmp_path, ["running", "running"])
    assert watch.check(now + 1, failed=False) == []
    write_peers(tmp_path, ["completed", "running"])
    assert watch.check(now + 2, failed=False) == []  # its grace starts now
    time.sleep(1.0)
    assert watch.check(now + 3, failed=False) == []
    time.sleep(1.0)
    [(rank, proc, after, returned)] = watch.check(now + 4.1, failed=False)
    assert (rank, proc.pid, after, returned) == (3, stuck.pid, 2.1, False)
    assert watch.check(now + 9, failed=False) == []  # once
    ended = end_lingering(rank, proc, after)
    assert ended.rank == 3 and ended.stack.count("Thread ") >= 1, ended.stack
    assert not is_alive(stuck)
    assert "global rank 3" in ended.summary() and "2.1 s after every other rank" in ended.summary()
    assert "after its script returned 0" in end_lingering(2, done, 1.0, returned=True).summary()


def test_ranks_whose_scripts_returned_are_due_together_once_every_one_on_the_node_did(tmp_path, spawn):
    # torchyard/rank_main.py leaves returned-<RANK> when a script returned 0; the other node still runs.
    write_peers(tmp_path, ["running", "running"])
    watch = LingerWatch(1.0, nnodes=2, node_rank=1, local_ranks=2, run_dir=tmp_path)
    first, second = spawn(IDLE), spawn(IDLE)
    watch.see(2, first)
    watch.see(3, second)
    (tmp_path / f"{protocol.RETURNED_PREFIX}2").touch()
    start = time.monotonic()
    while time.monotonic() - start < 2.5:
        assert watch.check(time.monotonic(), failed=False) == []  # rank 3 may still be working
        assert not watch.finishing(2)
        time.sleep(0.25)
    (tmp_path / f"{protocol.RETURNED_PREFIX}3").touch()
    due = []
    while not due and time.monotonic() - start < 10:
        due = watch.check(time.monotonic(), failed=False)
        assert due or watch.finishing(2)
        time.sleep(0.25)
    assert sorted((rank, proc.pid, returned) for rank, proc, _, returned in due) == [
        (2, first.pid, True), (3, second.pid, True)]
    assert all(after >= 1.0 for _, _, after, _ in due)


def test_a_rank_that_computes_or_a_failed_node_is_never_due(tmp_path, spawn):
    write_peers(tmp_path, ["completed", "running"])
    busy = LingerWatch(1.0, nnodes=2, node_rank=1, local_ranks=1, run_dir=tmp_path)
    busy.see(2, spawn(COMPUTES))
    failed = LingerWatch(1.0, nnodes=2, node_rank=1, local_ranks=1, run_dir=tmp_path)
    failed.see(2, spawn(IDLE))
    start = time.monotonic()
    while time.monotonic() - start < 3.5:
        now = time.monotonic()
        assert busy.check(now, failed=False) == []
        assert failed.check(now, failed=True) == []
        time.sleep(0.25)
    # One rank alone in a one-node job has nobody to outlive.
    alone = LingerWatch(0.5, nnodes=1, node_rank=0, local_ranks=1, run_dir=tmp_path)
    alone.see(0, spawn(IDLE))
    assert alone.check(time.monotonic(), failed=False) == []
    time.sleep(1)
    assert alone.check(time.monotonic(), failed=False) == []


def test_the_native_frame_that_names_a_hung_teardown():
    stack = """Process 5592: python -u plain_ddp.py
Python v3.11.7

Thread 5592 (idle): "MainThread"
    0x7ff6dc4a3f16 (libc.so.6)
    std::thread::join (libstdc++.so.6.0.30)
    c10d::ProcessGroupGloo::~ProcessGroupGloo (libtorch_cpu.so)
    c10d::Reducer::~Reducer (libtorch_cpu.so)
    <module> (plain_ddp.py:27)
Thread 5605 (idle)
    pybind11::gil_scoped_acquire::gil_scoped_acquire (libtorch_python.so)
"""
    assert _innermost_native_frame(stack) == "c10d::ProcessGroupGloo::~ProcessGroupGloo"
    assert _innermost_native_frame(stack.replace("    c10d::ProcessGroupGloo::~ProcessGroupGloo (libtorch_cpu.so)\n", "")
                                   .replace("    c10d::Reducer::~Reducer (libtorch_cpu.so)\n", "")) is None


def test_a_rank_blocked_without_a_word_is_silent_once_until_it_moves(spawn):
    proc = spawn(IDLE)
    watch = SilenceWatch(timeout=1.5)
    start = time.monotonic()
    assert watch.look(0, proc, 0.0, start) is None
    time.sleep(0.5)
    assert blocked_in_kernel(proc)
    assert watch.look(0, proc, 0.0, start + 1.0) is None
    stall = watch.look(0, proc, 0.0, start + 1.6)
    assert stall is not None and (stall.rank, stall.silent, stall.stalled_for, stall.timeout) == (0, True, 1.6, 1.5)
    assert watch.still_silent([0])
    assert watch.look(0, proc, 0.0, start + 5) is None  # once
    # A line from it (heard_at moves) is a sign of life: the clock starts again.
    assert watch.look(0, proc, start + 5, start + 5.5) is None
    assert not watch.still_silent([0])
    assert watch.look(0, proc, start + 5, start + 6.0) is None
    # Silence that named no hang (it waited in a collective) is looked at again after another timeout.
    assert watch.look(0, proc, start + 5, start + 7.1) is not None
    watch.not_yet(0, start + 7.2)
    assert not watch.still_silent([0])
    assert watch.look(0, proc, start + 5, start + 8.0) is None
    assert watch.look(0, proc, start + 5, start + 8.8) is not None


@pytest.mark.parametrize("code", [SLEEPS, COMPUTES])
def test_a_rank_that_sleeps_or_computes_quietly_is_not_silent(spawn, code):
    proc = spawn(code)
    watch = SilenceWatch(timeout=1.0)
    start = time.monotonic()
    assert not blocked_in_kernel(proc)
    for i in range(8):
        assert watch.look(0, proc, 0.0, start + i * 0.5) is None
        time.sleep(0.25)


def test_a_stopped_rank_counts_as_waiting_in_the_kernel(spawn):
    proc = spawn(COMPUTES)
    assert not blocked_in_kernel(proc)
    proc.suspend()  # SIGSTOP: it holds its peers whatever its stack
    try:
        deadline = time.monotonic() + 5
        while proc.status() != psutil.STATUS_STOPPED and time.monotonic() < deadline:
            time.sleep(0.05)
        assert blocked_in_kernel(proc)
    finally:
        proc.resume()


def test_a_rank_that_reads_slowly_is_not_silent():
    # Waiting in the kernel for its next bytes, as a slow download does: what it reads is a sign of life.
    reader = subprocess.Popen([sys.executable, "-c", "import sys\nprint('up', flush=True)\n"
                               "while sys.stdin.buffer.read(1):\n    pass"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert reader.stdin is not None and reader.stdout is not None and reader.stdout.readline().strip() == b"up"
        proc = psutil.Process(reader.pid)
        watch = SilenceWatch(timeout=1.0)
        start = time.monotonic()
        for i in range(8):
            reader.stdin.write(b"x")
            reader.stdin.flush()
            time.sleep(0.25)
            assert blocked_in_kernel(proc)
            assert watch.look(0, proc, 0.0, start + i * 0.5) is None
    finally:
        reader.kill()
        reader.wait()
