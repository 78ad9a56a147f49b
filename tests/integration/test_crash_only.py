"""Crash-only start and stop of `torchyard-server run`: kill -9 of the launcher leaves no control
plane behind while the training goes on, and the next start on the same data directory finishes
the job; a SIGTERM at any moment of start-up leaves nothing; one launcher per data directory."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from torchyard.node.proctree import find_job_processes

from .stack import ROOT, SERVER, Stack, start_stack

EXIT_LOCKED = 75


def stack_processes(data_dir: Path) -> list[psutil.Process]:
    """Every live process that names the data directory in its environment or its command line
    (Redis by its working directory, as it overwrites both)."""
    wanted = str(data_dir)
    found = []
    for proc in psutil.process_iter():
        if proc.pid == os.getpid():
            continue
        with contextlib.suppress(psutil.Error, OSError):
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if proc.cwd().startswith(wanted) or any(wanted in part for part in proc.cmdline()) or any(
                    wanted in value for value in proc.environ().values()):
                found.append(proc)
    return found


def is_training(proc: psutil.Process) -> bool:
    """A node supervisor (not an agent's standby, which has no node yet), what it started (they
    carry the job's id), or a warm pool that forked ranks (their parent, it reports their exits)."""
    with contextlib.suppress(psutil.Error, OSError):
        command = proc.cmdline()
        return (("torchyard.supervisor" in command and "--standby-fd" not in command)
                or "TORCHYARD_JOB_ID" in proc.environ()
                or ("torchyard.warm.zygote" in command and bool(proc.children())))
    return False


def wait_gone(procs: list[psutil.Process], timeout: float) -> list[str]:
    deadline = time.monotonic() + timeout
    alive = procs
    while time.monotonic() < deadline:
        alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        if not alive:
            return []
        time.sleep(0.2)
    return [f"{p.pid}: {' '.join(p.cmdline())[:120]}" for p in alive if p.is_running()]


def end_all(procs: list[psutil.Process]) -> None:
    """The test's own clean-up: by pid, whatever is still there."""
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()


def supervisors_of(data_dir: Path, job_id: int) -> list[psutil.Process]:
    return [p for p in stack_processes(data_dir) if "torchyard.supervisor" in p.cmdline()
            and any(f"/runs/job-{job_id}/" in part for part in p.cmdline())]


def kill_9(stack: Stack, job_id: int) -> list[psutil.Process]:
    """SIGKILL of the launcher mid-job: the whole control plane goes with it (web, controller,
    beat, ingest, agents, Redis, the agents' standby supervisors and warm pools), the training does
    not. Returns what the launcher had started, for the clean-up."""
    children = psutil.Process(stack.process.pid).children()
    started = psutil.Process(stack.process.pid).children(recursive=True)
    assert len(children) == 7, children  # web, controller, beat, ingest, 2 agents, Redis
    stack.process.kill()
    stack.process.wait()
    assert wait_gone(children, timeout=10) == []
    assert wait_gone([p for p in stack_processes(stack.data_dir) if not is_training(p)], timeout=60) == []
    assert len(supervisors_of(stack.data_dir, job_id)) == 2 and stack.job_processes(job_id), stack.log_tail()
    return started


def test_kill_9_of_the_launcher_mid_job_and_the_next_start_finishes_the_job(tmp_path):
    data_dir = (tmp_path / "data").resolve()
    stacks: list[Stack] = []
    started: list[psutil.Process] = []
    try:
        stacks.append(first := start_stack(tmp_path, env={}, agents=2))
        job = first.submit({
            "name": "survives-the-launcher", "entrypoint": "examples/mlp_ddp.py",
            "args": ["--steps", "600", "--step-sleep", "0.05"],
            "resources": {"nodes": 2, "procs_per_node": 1}, "fault_tolerance": {"max_restarts": 0},
        })
        deadline = time.monotonic() + 120
        while not first.events(job["id"], "metric"):
            assert time.monotonic() < deadline, first.log_tail()
            time.sleep(0.3)
        started += kill_9(first, job["id"])

        # The next start re-attaches to the supervisors that still train, and the job finishes.
        stacks.append(second := start_stack(tmp_path, env={}, agents=2))
        log = second.log_path.read_text()
        assert "found 2 node supervisor(s) of an earlier run still training" in log, second.log_tail()
        assert "re-attached 2 and ended 0 node supervisor(s)" in log, second.log_tail()
        final = second.wait_job(job["id"], {"completed", "failed", "stopped"}, timeout=180)
        assert final["status"] == "completed", final["status_reason"]
        assert final["attempt"] == 0 and final["restarts"] == 0, final  # the same attempt, no restart
        # Every report of both ranks arrived once, those made while no control plane listened too.
        metrics = second.events(job["id"], "metric")
        for rank in (0, 1):
            assert sorted(e["step"] for e in metrics if e["rank"] == rank) == list(range(10, 601, 10))

        # This time one node's training dies too (its machine rebooted): the next start ends the other
        # node (its partner is gone) and resumes the job from its checkpoint.
        job = second.submit({
            "name": "survives-a-reboot", "entrypoint": "examples/mlp_ddp.py",
            "args": ["--steps", "300", "--step-sleep", "0.05"], "resources": {"nodes": 2, "procs_per_node": 1},
            "checkpointing": {"enabled": True, "every_n_steps": 25}, "fault_tolerance": {"max_restarts": 0},
        })
        second.wait_checkpoint(job["id"])
        started += kill_9(second, job["id"])
        end_all([p for p in supervisors_of(data_dir, job["id"]) if any(a.endswith("/node-1") for a in p.cmdline())]
                + [p for p in second.job_processes(job["id"]) if p.environ().get("TORCHYARD_NODE_RANK") == "1"])
        stacks.append(third := start_stack(tmp_path, env={}, agents=2))
        assert f"interrupted job(s) {job['id']} of an earlier run" in third.log_path.read_text(), third.log_tail()
        # Nothing of the first attempt runs on.
        assert not [p for p in supervisors_of(data_dir, job["id"]) if "/attempt-0/" in " ".join(p.cmdline())]
        assert find_job_processes(job["id"], 0, under=data_dir) == []
        final = third.wait_job(job["id"], {"completed", "failed", "stopped"}, timeout=180)
        assert final["status"] == "completed", final["status_reason"]
        assert final["attempt"] == 1 and final["restarts"] == 0, final  # the crash used no restart
        assert any(e["attempt"] == 1 and "resumed from checkpoint at step" in e["line"] for e in third.logs(job["id"]))
    finally:
        for stack in stacks:
            stack.stop()
        end_all(started + stack_processes(data_dir))


def launcher(tmp_path: Path, log_name: str) -> tuple[subprocess.Popen, Path]:
    """`torchyard-server run` in a session of its own (as `make run` in a terminal), not waited for."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "TORCHYARD_STORAGE_URL")}
    env.update({"PORT": str(port), "TORCHYARD_DATA_DIR": str(tmp_path / "data"), "TORCHYARD_LOCAL_AGENTS": "1",
                "TORCHYARD_ADMIN_PASSWORD": "correct-horse-battery"})
    log_path = tmp_path / log_name
    with open(log_path, "wb") as log:
        process = subprocess.Popen([SERVER, "run"], cwd=str(ROOT), env=env, stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
    return process, log_path


def wait_for(process: subprocess.Popen, log_path: Path, moment: str) -> None:
    """Until the launcher's start-up reaches `moment`: a line of its log, or its children running."""
    deadline = time.monotonic() + 120
    while not (len(psutil.Process(process.pid).children()) >= 5 if moment == "children" else
               f"torchyard | {moment}" in log_path.read_text()):
        assert process.poll() is None and time.monotonic() < deadline, log_path.read_text()[-3000:]
        time.sleep(0.05)


# Before the signal handler (the interpreter starting), with Redis started, while the database is
# migrated, once the children run but before the web process answers, and about a second after
# "ready" (a script stopping a stack it has just started).
@pytest.mark.parametrize("moment", ["0.2 s", "started Redis", "database:", "children", "ready:"])
def test_sigterm_at_any_moment_of_start_up_leaves_nothing(tmp_path, moment):
    process, log_path = launcher(tmp_path, "stack.log")
    data_dir = (tmp_path / "data").resolve()
    started: list[psutil.Process] = []
    try:
        if moment == "0.2 s":
            time.sleep(0.2)
        else:
            wait_for(process, log_path, moment)
        if moment == "ready:":
            # A second launcher on the same data directory is refused, and touches nothing of the first.
            second, second_log = launcher(tmp_path, "second.log")
            assert second.wait(timeout=60) == EXIT_LOCKED
            assert f"another Torchyard stack (pid {process.pid}) is running on {data_dir}" in second_log.read_text()
            time.sleep(1)
            assert len(psutil.Process(process.pid).children()) == 6  # web, controller, beat, ingest, agent, Redis
        with contextlib.suppress(psutil.Error):
            started = psutil.Process(process.pid).children(recursive=True)
        # The whole process group, as a script stopping `make run` would.
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=90)
        assert wait_gone(started + stack_processes(data_dir), timeout=30) == [], log_path.read_text()[-3000:]
        if moment != "0.2 s":
            assert process.returncode == 0
            assert "torchyard | stopped" in log_path.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        end_all(started + stack_processes(data_dir))
