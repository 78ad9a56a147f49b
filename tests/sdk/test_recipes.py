"""The built-in recipes run as files, under plain python and under torchrun, and resume."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
from pathlib import Path

from sdk_support import WORKERS, torchrun_argv

EXAMPLES = WORKERS / "torchyard" / "examples"


def run(argv: list[str], env: dict[str, str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    result = subprocess.run(
        argv, env={**os.environ, **env}, cwd=cwd, capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, (
        f"exit {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    )
    return result


class EventCollector:
    """A node supervisor's receiving end: reads datagrams on a thread while the recipe runs."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)
        self.events: list[dict] = []
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.sock.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while not self._stop.is_set():
            try:
                self.events.append(json.loads(self.sock.recv(1 << 20)))
            except TimeoutError:
                continue

    def stop(self) -> list[dict]:
        self._stop.set()
        self._thread.join()
        self.sock.close()
        return self.events


def test_mlp_ddp_runs_under_plain_python_reports_events_and_resumes(tmp_path):
    collector = EventCollector(tmp_path / "events.sock")
    env = {"TORCHYARD_EVENT_SOCKET": collector.path, "TORCHYARD_CHECKPOINT_URL": str(tmp_path / "ckpt")}
    try:
        first = run(
            [sys.executable, str(EXAMPLES / "mlp_ddp.py"), "--steps", "30", "--checkpoint-every", "10"],
            env,
            tmp_path,
        )
    finally:
        events = collector.stop()
    assert "rank 0: starting" in first.stdout and "rank 0 step 30 loss" in first.stdout

    metrics = [e for e in events if e["type"] == "metric"]
    assert [e["step"] for e in metrics] == [10, 20, 30]
    # The recipe declares its length (sdk.set_total_steps), so every metric carries it for the ETA.
    assert all(set(e) == {"type", "rank", "step", "ts", "loss", "throughput", "total_steps"} for e in metrics)
    assert {e["total_steps"] for e in metrics} == {30}
    checkpoints = [e for e in events if e["type"] == "checkpoint"]
    assert [e["step"] for e in checkpoints] == [10, 20, 30]
    assert checkpoints[-1]["uri"] == (tmp_path / "ckpt" / "step-00000030" / "manifest.json").as_uri()

    second = run([sys.executable, str(EXAMPLES / "mlp_ddp.py"), "--steps", "40", "--checkpoint-every", "10"],
                 {"TORCHYARD_CHECKPOINT_URL": str(tmp_path / "ckpt")}, tmp_path)  # fmt: skip
    assert "rank 0: resumed from checkpoint at step 30" in second.stdout
    assert "training steps 31..40" in second.stdout
    assert (tmp_path / "ckpt" / "step-00000040" / "manifest.json").is_file()


def test_mlp_ddp_runs_under_torchrun_with_the_job_config_and_resumes(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "hyperparameters": {"batch_size": 64},
        "scaling": {"mode": "keep_global_batch"},
        "checkpointing": {"enabled": True, "every_n_steps": 10, "keep": 2},
    }))  # fmt: skip
    env = {"TORCHYARD_CONFIG": str(config), "TORCHYARD_CHECKPOINT_URL": str(tmp_path / "ckpt")}
    first = run(torchrun_argv(EXAMPLES / "mlp_ddp.py", "--steps", "20"), env, tmp_path)
    for rank in (0, 1):
        assert f"rank {rank}: starting (2 processes, backend gloo)" in first.stdout
        assert f"rank {rank} step 20 loss" in first.stdout and f"rank {rank}: done at step 20" in first.stdout
    assert "batch 32 per rank (global 64)" in first.stdout
    manifest = json.loads((tmp_path / "ckpt" / "step-00000020" / "manifest.json").read_text())
    assert manifest["world_size"] == 2

    second = run(torchrun_argv(EXAMPLES / "mlp_ddp.py", "--steps", "30"), env, tmp_path)
    for rank in (0, 1):
        assert f"rank {rank}: resumed from checkpoint at step 20" in second.stdout
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == [
        "LATEST",
        "step-00000020",
        "step-00000030",
    ]


def test_char_gpt_trains_on_the_standard_library_and_checkpoints(tmp_path):
    # Resuming is the same code as mlp_ddp's (tested above); one run keeps this folder fast.
    env = {"TORCHYARD_CHECKPOINT_URL": str(tmp_path / "ckpt")}
    argv = [sys.executable, str(EXAMPLES / "char_gpt.py"), "--steps", "20", "--checkpoint-every", "10"]
    result = run([*argv, "--sample-chars", "20"], env, tmp_path)
    losses = [
        float(line.split("loss=")[1].split()[0]) for line in result.stdout.splitlines() if "loss=" in line
    ]
    assert len(losses) == 2 and losses[-1] < 4.5  # from ~ln(vocab) = 5.1 at the start
    assert "rank 0: sample after 20 steps" in result.stdout
    manifest = json.loads((tmp_path / "ckpt" / "step-00000020" / "manifest.json").read_text())
    assert manifest["metadata"]["recipe"] == "char_gpt"


def eval_losses(output: str) -> dict[int, float]:
    """Step -> loss on the fixed evaluation batch, from rank 0's "eval loss X at step S" lines."""
    # Two ranks share torchrun's output pipe, so their lines can interleave mid-line.
    return {int(step): float(loss) for loss, step in re.findall(r"rank 0: eval loss ([\d.]+) at step (\d+)", output)}


def test_mlp_fsdp_saves_sharded_checkpoints_that_resume_at_another_world_size(tmp_path):
    env = {"TORCHYARD_CHECKPOINT_URL": str(tmp_path / "ckpt")}
    first = run(torchrun_argv(EXAMPLES / "mlp_fsdp.py", "--steps", "20", "--checkpoint-every", "10"), env, tmp_path)
    assert "rank 1: starting (2 processes, backend gloo, FSDP)" in first.stdout
    manifest = json.loads((tmp_path / "ckpt" / "step-00000020" / "manifest.json").read_text())
    assert manifest["world_size"] == 2 and manifest["layout"] == "torch.distributed.checkpoint"
    assert sorted(f["path"] for f in manifest["files"]) == [".metadata", "__0_0.distcp", "__1_0.distcp"]

    # One plain process takes both ranks' shards of the weights and of Adam's state.
    second = run([sys.executable, str(EXAMPLES / "mlp_fsdp.py"), "--steps", "30", "--checkpoint-every", "10"],
                 env, tmp_path)  # fmt: skip
    assert "rank 0: checkpoint saved by 2 processes" in second.stdout
    assert "rank 0: resumed from checkpoint at step 20" in second.stdout
    saved, resumed = eval_losses(first.stdout), eval_losses(second.stdout)
    assert abs(resumed[20] - saved[20]) < 1e-5, (saved, resumed)  # the very weights that were saved
    assert "training steps 21..30" in second.stdout and 30 in resumed
