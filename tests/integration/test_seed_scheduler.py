"""The Go scheduler's workflow on a real stack: agents that declare their GPUs (`--gpus --models
--memories`, taken as declared on this GPU-less machine, with the warning the machine shows) and the
address the others reach them at (`--addr`), the `simple` and `balanced` policies and an installed
one choosing among them, its task files submitted with `torchyard submit` (its sample task as
written refused naming its model and dataset; with a built-in model and dataset, its params reach
the recipe), and `torchyard monitor` driven in a terminal (a pty)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from .stack import start_pg_stack, stop_pg_stack

BIN = Path(sys.executable).parent
SEED_TASK = {  # the Go scheduler's sample task, as its guide writes it
    "name": "ResNet50 Training",
    "required_gpus": 2,
    "min_gpu_memory": 8192,
    "params": {"model": "resnet50", "dataset": "imagenet", "batch_size": "64", "learning_rate": "0.001",
               "epochs": "90", "optimizer": "sgd", "momentum": "0.9", "weight_decay": "0.0001"},
}
# The same with a model and dataset Torchyard has built in: every other param reaches the recipe.
BUILT_IN_TASK = {**SEED_TASK, "params": {**SEED_TASK["params"], "model": "mlp", "dataset": "synthetic"}}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A stack with no local agents, and two machines whose agents declare their GPUs as the Go
    scheduler's workers do: rtx-box with two RTX 3090s, a100-box with one A100 of 80 GB, which also
    gives its address as that worker's default, localhost:0 (it only ever plans here, never runs)."""
    tmp = tmp_path_factory.mktemp("seed4")
    stack = start_pg_stack(tmp, agents=0, args=("--policy", "balanced"))  # as its server: --policy=balanced
    agents = []
    try:
        for machine, flags in (("rtx-box", ["--gpus", "0,1", "--models", "RTX3090,RTX3090", "--memories", "24576,24576"]),
                               ("a100-box", ["--gpus", "0", "--models", "A100", "--memories", "81920",
                                             "--addr", "localhost:0"])):
            created = stack.api("POST", "/api/machines", json={"name": machine, "host": "127.0.0.1"}).json()
            with open(tmp / f"{machine}.log", "wb") as log:  # the agent keeps its own copy of the file
                agents.append(subprocess.Popen(
                    [str(BIN / "torchyard"), "agent", "--server", stack.base, "--token", created["token"],
                     "--work-dir", str(tmp / machine), *flags],
                    stdout=subprocess.DEVNULL, stderr=log, start_new_session=True))
        stack.wait_ready(machines=2, timeout=120)
        yield stack
    finally:
        for agent in agents:
            agent.terminate()
        for agent in agents:
            try:
                agent.wait(timeout=30)
            except subprocess.TimeoutExpired:
                agent.kill()
        stop_pg_stack(stack)


def machine(stack, name: str) -> dict:
    return next(m for m in stack.api("GET", "/api/machines").json() if m["name"] == name)


def run_cli(stack, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    env = dict(os.environ, TORCHYARD_SERVER=stack.base, TORCHYARD_TOKEN=stack.token)
    return subprocess.run([str(BIN / "torchyard"), *args], capture_output=True, text=True, timeout=timeout, env=env)


def test_declared_gpus_are_scheduled_as_declared_and_the_machine_warns_that_nvml_sees_none(cluster):
    rtx = machine(cluster, "rtx-box")
    caps = rtx["capabilities"]
    assert caps["gpus"] == [{"index": 0, "name": "RTX3090", "memory_mb": 24576},
                            {"index": 1, "name": "RTX3090", "memory_mb": 24576}]
    assert (caps["gpu_count"], caps["gpu_memory"], caps["gpus_declared"], caps["gpus_detected"]) == (2, 49152, True, [])
    assert caps["gpu_warnings"] == ["NVML sees no GPU here: GPUs 0, 1 scheduled as declared"]
    assert machine(cluster, "a100-box")["capabilities"]["gpus"] == [{"index": 0, "name": "A100", "memory_mb": 81920}]
    # Registered as 127.0.0.1; its agent's --addr says where the others reach it.
    assert (machine(cluster, "a100-box")["host"], rtx["host"]) == ("localhost", "127.0.0.1")


def test_simple_balanced_and_an_installed_policy_choose_among_the_declared_machines(cluster):
    def chosen(policy: str, min_gpu_memory: int = 8192) -> tuple[str, list[int]]:
        answer = cluster.api("POST", "/api/jobs/plan", json={
            "name": "p", "entrypoint": "examples/mlp_ddp.py", "placement": {"policy": policy},
            "resources": {"nodes": 1, "procs_per_node": 1, "gpus_per_node": 1, "min_gpu_memory": min_gpu_memory}})
        assert answer.status_code == 200, answer.text
        node = answer.json()["nodes"][0]
        return node["machine_name"], node["gpus"]

    # simple: no free GPU left behind on the one-GPU machine; balanced: the most free GPUs.
    assert chosen("simple") == ("a100-box", [0])
    assert chosen("balanced") == ("rtx-box", [0])
    assert chosen("reverse-name") == ("rtx-box", [1])  # tests/plugins: last name first, the highest GPU
    assert chosen("balanced", min_gpu_memory=40_000) == ("a100-box", [0])
    # A job that names no policy gets the server's: this stack runs `torchyard-server run --policy balanced`.
    unnamed = cluster.api("POST", "/api/jobs/plan", json={
        "name": "p", "entrypoint": "examples/mlp_ddp.py",
        "resources": {"nodes": 1, "procs_per_node": 1, "gpus_per_node": 1, "min_gpu_memory": 8192}}).json()
    assert unnamed["nodes"][0]["machine_name"] == "rtx-box", unnamed
    refused = cluster.api("POST", "/api/jobs/plan", json={"name": "p", "entrypoint": "examples/mlp_ddp.py",
                                                          "placement": {"policy": "nope"}})
    assert refused.status_code == 400 and "choose one of: pack, spread, simple, balanced" in refused.text


def test_the_sample_task_is_refused_naming_its_model_and_dataset_as_the_file_does(cluster, tmp_path):
    task = tmp_path / "sample_task.json"
    task.write_text(json.dumps(SEED_TASK, indent=2))
    refused = run_cli(cluster, "submit", str(task), "--detach")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert refused.stderr.splitlines()[-3:] == [
        "torchyard: POST /api/jobs: HTTP 400",
        "  params.model: unknown model 'resnet50'; known: char_gpt, mlp, transformer.",
        "  params.dataset: unknown dataset 'imagenet'; built-in datasets: synthetic, digits, python-source."]
    task.write_text(json.dumps({**BUILT_IN_TASK, "params": {**BUILT_IN_TASK["params"], "nesterov": "true"}}))
    refused = run_cli(cluster, "submit", str(task), "--detach")
    assert refused.returncode == 2 and "  params.nesterov: mlp_ddp.py does not read nesterov; it reads" in refused.stderr


def test_a_task_with_a_built_in_model_is_submitted_with_its_params_and_placed_on_the_declared_gpus(cluster, tmp_path):
    task = tmp_path / "sample_task.json"
    task.write_text(json.dumps(BUILT_IN_TASK, indent=2))
    submitted = run_cli(cluster, "submit", str(task), "--detach")
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    assert "runs the built-in recipe for model mlp and dataset synthetic on 2 rank(s)" in submitted.stderr
    job_id = int(submitted.stdout.split()[0].lstrip("#"))
    try:
        deadline = time.monotonic() + 60
        while not (job := cluster.job(job_id))["plan"]:
            assert time.monotonic() < deadline, job
            time.sleep(0.3)
        assert job["name"] == "ResNet50 Training"
        resources = job["spec"]["resources"]
        assert {k: resources[k] for k in ("nodes", "procs_per_node", "gpus_per_node", "min_gpu_memory")} == {
            "nodes": 1, "procs_per_node": 2, "gpus_per_node": 2, "min_gpu_memory": 8192}
        assert (job["spec"]["entrypoint"], job["spec"]["dataset"]) == ("examples/mlp_ddp.py", "synthetic")
        assert job["spec"]["hyperparameters"] == {
            "batch_size": 64, "learning_rate": 0.001, "epochs": 90, "optimizer": "sgd", "momentum": 0.9,
            "weight_decay": 0.0001}
        assert [(n["machine_name"], n["gpus"]) for n in job["plan"]["nodes"]] == [("rtx-box", [0, 1])]
        assert job["plan"]["backend"] == "nccl" and job["plan"]["hyperparameters"]["batch_size"] == 32
    finally:
        cluster.api("POST", f"/api/jobs/{job_id}/stop")
        cluster.wait_job(job_id, {"stopped", "failed", "completed"}, timeout=120)


def test_a_malformed_task_file_is_a_readable_message_and_a_bad_one_a_400(cluster, tmp_path):
    task = tmp_path / "task.json"
    task.write_text(json.dumps({**SEED_TASK, "required_gpus": "two"}))
    result = run_cli(cluster, "submit", str(task))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip() == (f"torchyard: {task}: required_gpus: expected the number of GPUs the task needs "
                                     "(a whole number, 0 or more), found \"two\"")
    task.write_text(json.dumps({**SEED_TASK, "params": ["batch_size", 64]}))
    result = run_cli(cluster, "submit", str(task))
    assert result.returncode == 2 and "params: expected a mapping of names to values" in result.stderr
    # The server checks what the CLI cannot: 63 samples do not split over 2 ranks.
    task.write_text(json.dumps({**SEED_TASK, "params": {"batch_size": "63"}}))
    result = run_cli(cluster, "submit", str(task), "--detach")
    assert result.returncode == 2 and "HTTP 400" in result.stderr and "batch_size" in result.stderr, result.stderr


# --- torchyard monitor in a terminal --------------------------------------------------------------
ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][A-Z0-9]|\r")


def _as_a_shell_starts_it() -> None:
    """In the child, before exec: the pty becomes the session's controlling terminal (after setsid), so
    Ctrl-C is a SIGINT, and SIGINT is handled and unblocked, as a shell starts a foreground command. A
    pytest worker's own signal state (an xdist worker may ignore or block SIGINT, depending on what ran
    in it before) would otherwise be inherited across exec, and the command would never see Ctrl-C."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _sigint_state(pid: int | str) -> str:
    """Whether `pid` ignores or blocks SIGINT (/proc's SigIgn and SigBlk masks; bit 1 is SIGINT)."""
    try:
        fields = dict(line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                      if line.startswith(("SigIgn", "SigBlk")))
    except OSError:
        return "gone"
    return ", ".join(f"{name} {'SIGINT' if int(mask, 16) & 2 else '-'}" for name, mask in sorted(fields.items()))


class Terminal:
    """A command on the slave side of a pty (its controlling terminal, 50 x 160), read from the
    master side; `typed` writes keys as a user would (Ctrl-C is "\\x03")."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 160, 0, 0))
        self.process = subprocess.Popen(
            argv, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True, close_fds=True,
            preexec_fn=_as_a_shell_starts_it)
        os.close(slave)
        self.raw = b""

    @property
    def screen(self) -> str:
        return ANSI.sub("", self.raw.decode(errors="replace"))

    def read(self, timeout: float) -> None:
        ready, _, _ = select.select([self.master], [], [], timeout)
        if ready:
            with contextlib.suppress(OSError):  # EIO: the command has exited
                self.raw += os.read(self.master, 65536)

    def wait_for(self, pattern: str, timeout: float = 30, after: int = 0) -> int:
        """Where `pattern` first appears in the screen's text past `after`, once it does."""
        deadline = time.monotonic() + timeout
        while True:
            found = re.search(pattern, self.screen[after:])
            if found:
                return after + found.start()
            if time.monotonic() > deadline or self.process.poll() is not None:
                self.read(0.2)
                raise AssertionError(f"{pattern!r} not on screen:\n{self.screen[-4000:]}")
            self.read(0.2)

    def wait_exit(self, timeout: float) -> int:
        """The command's exit code once it has exited, reading its screen meanwhile: a command that
        writes to a pty nobody reads blocks once the pty's buffer is full, and never exits."""
        deadline = time.monotonic() + timeout
        while (code := self.process.poll()) is None:
            if time.monotonic() > deadline:
                raise AssertionError(f"still running after {timeout:g} s:\n{self.screen[-4000:]}")
            self.read(0.2)
        return code

    def interrupted(self, timeout: float) -> int:
        """Ctrl-C typed, and the exit code once the command has ended. Should the terminal's SIGINT not
        end it within 5 s, the same SIGINT is sent to its process group directly, as a second Ctrl-C would,
        and a failure says whether the command or this process ignored or blocked SIGINT."""
        self.typed("\x03")
        with contextlib.suppress(AssertionError):
            return self.wait_exit(5)
        said = f"the command: {_sigint_state(self.process.pid)}; this test's process: {_sigint_state('self')}"
        os.killpg(self.process.pid, signal.SIGINT)
        try:
            return self.wait_exit(timeout)
        except AssertionError as exc:
            raise AssertionError(f"{said}\n{exc}") from None

    def typed(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    def close(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        os.close(self.master)


def test_monitor_shows_the_machines_their_gpus_and_tasks_live_until_ctrl_c(cluster, tmp_path):
    task = tmp_path / "long.json"
    task.write_text(json.dumps({"name": "long-task", "required_gpus": 2, "min_gpu_memory": 8192,
                                "params": {"batch_size": "64"}, "distributed": {"backend": "gloo"},
                                "args": ["--steps", "100000", "--step-sleep", "0.05"]}))
    submitted = run_cli(cluster, "submit", str(task), "--detach")
    assert submitted.returncode == 0, submitted.stderr
    job_id = int(submitted.stdout.split()[0].lstrip("#"))
    env = dict(os.environ, TORCHYARD_SERVER=cluster.base, TORCHYARD_TOKEN=cluster.token, TERM="xterm-256color")
    env.pop("COLUMNS", None)
    env.pop("LINES", None)
    terminal = Terminal([str(BIN / "torchyard"), "monitor", "--refresh", "0.5"], env)
    try:
        terminal.wait_for(r"torchyard monitor .* 2 machines")
        terminal.wait_for(r"a100-box\s+online")
        terminal.wait_for(r"0\s+A100\s+80 GB\s+0%\s+free")
        terminal.wait_for(r"warning: NVML sees no GPU here: GPUs 0, 1 scheduled as declared")
        # The task on each of rtx-box's GPUs, once its node is placed.
        terminal.wait_for(rf"0\s+RTX3090\s+24 GB\s+0%\s+#{job_id} long-task node 0", timeout=60)
        terminal.wait_for(rf"1\s+RTX3090\s+24 GB\s+0%\s+#{job_id} long-task node 0")
        # It follows a change on the server: rtx-box drained.
        rtx = machine(cluster, "rtx-box")
        seen = len(terminal.screen)
        assert cluster.api("PATCH", f"/api/machines/{rtx['id']}", json={"status": "draining"}).status_code == 200
        terminal.wait_for(r"rtx-box\s+draining", after=seen)
        assert terminal.interrupted(15) == 0
        terminal.read(0.5)
        assert "Traceback" not in terminal.screen and "KeyboardInterrupt" not in terminal.screen
    finally:
        terminal.close()
        cluster.api("PATCH", f"/api/machines/{machine(cluster, 'rtx-box')['id']}", json={"status": "online"})
        cluster.api("POST", f"/api/jobs/{job_id}/stop")
        cluster.wait_job(job_id, {"stopped", "failed", "completed"}, timeout=120)

    # One machine, and a machine that is not there.
    one = Terminal([str(BIN / "torchyard"), "monitor", "--worker", "a100-box", "--once"], env)
    try:
        one.wait_for(r"(?s)1 machine .*a100-box\s+online")
        assert one.wait_exit(30) == 0
        one.read(0.5)
        assert "rtx-box" not in one.screen
    finally:
        one.close()
    missing = run_cli(cluster, "monitor", "--worker", "nope")
    assert missing.returncode == 2
    assert missing.stderr.strip() == "torchyard: --worker nope: no such machine (machines: a100-box, rtx-box)"
