"""The agent distribution alone, as a GPU host gets it: a fresh virtualenv holding only ./workers
(and the host's torch), no Django, joins the stack with its token and trains a job with its own
Python.

Slow by nature: it builds a virtualenv and installs torch into it (pip's cache and the wheel on
disk keep that to a minute or two; the first run on a cold cache downloads the small dependencies).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import psutil
import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
WHEELS = Path("/opt/wheels")
# The torch the main virtualenv tests with, from the wheel on disk: any looser pin (or none) makes
# pip download a multi-GB CUDA build.
TORCH = f"torch=={torch.__version__.split('+')[0]}"


def clean_env(**extra: str) -> dict[str, str]:
    """This environment minus whatever would let the fresh venv import the checkout or the main
    venv instead of its own install (the point of the test)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")}
    env.update(extra)
    return env


def run(argv: list[str], timeout: float, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=clean_env(), **kwargs)


def build_agent_venv(tmp: Path) -> tuple[Path, dict[str, float]]:
    """`python -m venv`, then `pip install ./workers torch numpy`: the README's install on a GPU host."""
    timings: dict[str, float] = {}
    venv = tmp / "venv"
    started = time.monotonic()
    made = run([sys.executable, "-m", "venv", str(venv)], timeout=300)
    assert made.returncode == 0, made.stdout + made.stderr
    timings["venv"] = time.monotonic() - started
    # Installed from a copy: an in-tree build writes build/ and *.egg-info into the shared working
    # tree, and a stale build/lib there can leak files deleted from the sources into the wheel.
    source = tmp / "workers"
    shutil.copytree(ROOT / "workers", source,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "*.pyc"))
    started = time.monotonic()
    # pip's cache stays on: CI installs this on every run.
    installed = run([str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", "--no-compile",
                     "--find-links", str(WHEELS), str(source), TORCH, "numpy"], timeout=1800)
    timings["pip install"] = time.monotonic() - started
    assert installed.returncode == 0, installed.stdout[-4000:] + installed.stderr[-4000:]
    return venv, timings


def wait_machine(stack, machine_id: int, status: str, timeout: float, log: Path) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        machine = stack.api("GET", f"/api/machines/{machine_id}").json()
        if machine["status"] == status:
            return machine
        assert time.monotonic() < deadline, (f"machine is {machine['status']} after {timeout}s, wanted {status}; "
                                             f"agent log:\n{log.read_text(errors='replace')[-4000:]}")
        time.sleep(0.3)


class ProcessWatch(threading.Thread):
    """Records the command line and PYTHONPATH of every process of a job under one agent's work
    dir while it runs: which Python the supervisor, torchrun and the ranks were."""

    def __init__(self, job_id: int, under: Path) -> None:
        super().__init__(daemon=True)
        self.job_id, self.under = job_id, under
        self.seen: dict[int, tuple[list[str], str]] = {}
        self.done = threading.Event()

    def run(self) -> None:
        from torchyard.node.proctree import find_job_processes

        while not self.done.is_set():
            for proc in find_job_processes(self.job_id, under=self.under):
                with contextlib.suppress(psutil.Error):
                    self.seen.setdefault(proc.pid, (proc.cmdline(), proc.environ().get("PYTHONPATH", "")))
            self.done.wait(0.1)


@pytest.mark.timeout(2400)
@pytest.mark.skipif(not any(WHEELS.glob("torch-*.whl")), reason=f"no torch wheel in {WHEELS}: pip would download a CUDA build")
def test_the_agent_distribution_alone_joins_and_trains_with_its_own_python(pg_stack, tmp_path):
    venv, timings = build_agent_venv(tmp_path)
    python, bin_dir = str(venv / "bin" / "python"), venv / "bin"

    # Only the agent distribution: no Django, no server, and nothing it needs is missing.
    no_django = run([python, "-c", "import django"], timeout=60)
    assert no_django.returncode != 0 and "No module named 'django'" in no_django.stderr
    no_server = run([python, "-c", "import torchyard_server"], timeout=60)
    assert no_server.returncode != 0 and "No module named 'torchyard_server'" in no_server.stderr
    check = run([python, "-m", "pip", "check", "--disable-pip-version-check"], timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr
    own = run([python, "-c", "import torchyard, torchyard.sdk; print(torchyard.__file__)"], timeout=60, cwd=tmp_path)
    assert own.returncode == 0 and own.stdout.strip().startswith(str(venv)), own.stdout + own.stderr
    assert run([str(bin_dir / "torchyard"), "--help"], timeout=60).returncode == 0

    name = f"fresh-venv-{uuid.uuid4().hex[:6]}"
    created = pg_stack.api("POST", "/api/machines", json={"name": name, "host": "127.0.0.1"})
    assert created.status_code == 201, created.text
    machine = created.json()
    work_dir, agent_log = tmp_path / "agent", tmp_path / "agent.log"
    agent = None
    watch = None
    try:
        started = time.monotonic()
        with open(agent_log, "wb") as log:
            agent = subprocess.Popen(
                [str(bin_dir / "torchyard"), "agent", "--server", pg_stack.base, "--token", machine["token"],
                 "--work-dir", str(work_dir)],
                cwd=tmp_path, env=clean_env(), stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )
        wait_machine(pg_stack, machine["id"], "online", timeout=90, log=agent_log)
        timings["agent online"] = time.monotonic() - started

        started = time.monotonic()
        job = pg_stack.submit({
            "name": "agent-distribution",
            "entrypoint": "examples/mlp_ddp.py",
            # A short pause per step keeps the ranks alive long enough to be looked at.
            "args": ["--steps", "20", "--step-sleep", "0.25"],
            "resources": {"nodes": 1, "procs_per_node": 1},
            "placement": {"machines": [name]},
            "fault_tolerance": {"max_restarts": 0},
        })
        watch = ProcessWatch(job["id"], work_dir)
        watch.start()
        final = pg_stack.wait_job(job["id"], {"completed", "failed", "stopped"}, timeout=300)
        timings["job"] = time.monotonic() - started
        watch.done.set()
        watch.join(timeout=10)
        assert final["status"] == "completed", (f"{final['status']}: {final.get('failure_reason')}\n"
                                                f"{pg_stack.job_log_tail(job['id'])}\n--- agent ---\n"
                                                f"{agent_log.read_text(errors='replace')[-3000:]}")
        assert [n["machine"]["name"] for n in final["nodes"]] == [name]
        assert any("rank 0: done at step 20" in e["line"] for e in pg_stack.logs(job["id"]))

        # Supervisor, torchrun and the rank all ran on the fresh venv's Python, and the rank found
        # the SDK and the recipe in that venv's own install.
        seen = list(watch.seen.values())
        ranks = [(argv, path) for argv, path in seen if any(a.endswith("examples/mlp_ddp.py") for a in argv)
                 and "torch.distributed.run" not in argv]
        assert ranks, f"no rank process was seen: {seen}"
        for argv, pythonpath in ranks:
            assert argv[0] == python, argv
            assert next(a for a in argv if a.endswith("mlp_ddp.py")).startswith(str(venv)), argv
            # The SDK comes through a folder that links to the venv's torchyard package and nothing
            # else (the agent's other packages must not shadow the training environment's).
            sdk_dir = Path(pythonpath.split(os.pathsep)[0])
            assert (sdk_dir / "torchyard").resolve().is_relative_to(venv.resolve()), pythonpath
        launchers = [argv for argv, _ in seen if "torch.distributed.run" in argv or "torchyard.supervisor" in argv]
        assert launchers and all(argv[0] == python for argv in launchers), launchers
    finally:
        if watch is not None:
            watch.done.set()
        if agent is not None:
            agent.kill()
            agent.wait(timeout=30)
        # A failed run may leave a detached supervisor (and its ranks) behind: nothing of this
        # test outlives it.
        from torchyard.node.proctree import find_job_processes, kill_processes

        for run_dir in work_dir.glob("runs/job-*"):
            with contextlib.suppress(ValueError, psutil.Error):
                kill_processes(find_job_processes(int(run_dir.name.removeprefix("job-")), under=work_dir),
                               sig=signal.SIGKILL)
        pg_stack.api("DELETE", f"/api/machines/{machine['id']}")
        print("\nagent distribution timings: " + ", ".join(f"{k} {v:.1f}s" for k, v in timings.items()))
