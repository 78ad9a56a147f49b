"""The Rust coordinator on the stack `make run` starts (`torchyard-server run`, embedded): its quick start with
curl, verbatim (no token: the server's own OS user on loopback), and its demo worker on line
shards, a rank killed mid-shard, recovered at the next line: every line processed exactly once."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .stack import ROOT

WORKER = ROOT / "workers" / "torchyard" / "examples" / "seed001_worker.py"


@pytest.fixture(scope="module")
def seed_stack(embedded_stack):
    # The shared one (conftest.py), started with the seed's own settings as its users set them for its
    # coordinator (SLEEP_SEC=0.02, CHECKPOINT_EVERY=10): quick steps for a test.
    return embedded_stack


def curl(*args: str, timeout: float = 30) -> str:
    done = subprocess.run(["curl", "-s", *args], capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr
    return done.stdout


def sse(text: str) -> list[dict]:
    """The messages of an event stream's whole text, as {"event", "data"}."""
    messages = []
    for block in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line and not line.startswith(":"))
        if "event" in fields:
            messages.append({"event": fields["event"], "data": json.loads(fields["data"])})
    return messages


def test_the_quick_start_works_verbatim(seed_stack):
    base = seed_stack.base.replace("127.0.0.1", "localhost")
    assert json.loads(curl(f"{base}/health")) == {"status": "ok"}
    created = json.loads(curl("-X", "POST", f"{base}/jobs", "-H", "Content-Type: application/json",
                              "-d", '{"world_size": 4}'))
    job_id = created["job_id"]
    assert created["spec"]["entrypoint"] == "examples/seed001_worker.py", created

    summary = json.loads(curl(f"{base}/jobs/{job_id}/summary"))
    assert summary["id"] == job_id and summary["status"] in ("queued", "planning", "dispatching", "running")
    # The stream follows the job to its end, then closes.
    messages = sse(curl(f"{base}/jobs/{job_id}/logs/stream", timeout=180))
    assert messages[-1]["event"] == "end" and messages[-1]["data"]["status"] == "completed", messages[-5:]
    lines = [m["data"] for m in messages if m["event"] == "log"]
    assert {line["rank"] for line in lines if line["rank"] is not None} == {0, 1, 2, 3}
    # Synthetic shards (no DATASET_DIR): 8 of 50 lines, 2 per rank: 100 steps each.
    assert any("rank 3: done after 100 steps, 100 lines" in line["line"] for line in lines)

    summary = json.loads(curl(f"{base}/jobs/{job_id}/summary"))
    assert summary["status"] == "completed" and summary["world_size"] == 4 and summary["step"] == 100
    assert summary["checkpoints"] >= 1 and summary["last_checkpoint_step"] == 100
    # Newest first; the stack is shared, so earlier modules' jobs may follow it.
    assert [j["id"] for j in json.loads(curl(f"{base}/jobs/summaries"))][0] == job_id
    # With a browser's Accept, the same path is the dashboard's page (the built app, or the page
    # that says to build it).
    kind = curl("-H", "Accept: text/html,*/*;q=0.8", "-o", "/dev/null", "-w", "%{content_type}", f"{base}/jobs/{job_id}")
    assert kind.startswith("text/html")


def test_a_rank_killed_mid_shard_resumes_at_the_next_line_and_every_line_is_processed_once(seed_stack, tmp_path):
    data, ids = tmp_path / "data", tmp_path / "ids"
    subprocess.run([sys.executable, str(WORKER), "--make-dataset", str(data), "--shards", "8", "--lines", "25"],
                   check=True, capture_output=True)
    job = seed_stack.submit({
        "name": "line-shards-kill", "entrypoint": "examples/seed001_worker.py",
        "args": ["--record-ids", str(ids), "--log-every", "1"],
        "env": {"DATASET_DIR": str(data), "CHECKPOINT_EVERY": "5", "SLEEP_SEC": "0.1"},
        "resources": {"workers": 4}, "checkpointing": {"enabled": True, "every_n_steps": 5},
        "fault_tolerance": {"max_restarts": 2},
    })
    checkpoint = seed_stack.wait_checkpoint(job["id"])
    time.sleep(0.25)  # a few lines past the checkpoint, inside each rank's first shard of 25 lines
    kill_rank(seed_stack, job["id"], rank=1)

    final = seed_stack.wait_job(job["id"], {"completed", "failed", "stopped"}, timeout=180)
    assert final["status"] == "completed", f"{final['status_reason']}\n{seed_stack.job_log_tail(job['id'])}"
    assert final["attempt"] == 1
    resumed = [re.search(r"resumed from checkpoint at step (\d+) \(shard (\d+), line (\d+)\)", e["line"])
               for e in seed_stack.logs(job["id"]) if e["attempt"] == 1]
    resumed = [m for m in resumed if m]
    assert len(resumed) == 4
    # Inside a shard: every rank goes on at the line after the checkpointed step's.
    assert all(int(m[1]) >= checkpoint["step"] and int(m[3]) == int(m[1]) < 25 for m in resumed), resumed

    processed = [line for path in sorted(Path(ids).rglob("*.txt")) for line in path.read_text().splitlines()]
    expected = [f"shard-{s:03d}.txt:{i}" for s in range(8) for i in range(25)]
    assert len(processed) == len(set(processed)) and sorted(processed) == sorted(expected)
    assert seed_stack.wait_no_job_processes(job["id"]) == []


def kill_rank(stack, job_id: int, *, rank: int) -> None:
    """SIGKILL the training process of global rank `rank` in attempt 0, whichever node holds it."""
    victims = [p for p in stack.job_processes(job_id)
               if p.environ().get("RANK") == str(rank) and p.environ().get("TORCHYARD_ATTEMPT") == "0"
               and "seed001_worker.py" in " ".join(p.cmdline()) and "torch.distributed.run" not in " ".join(p.cmdline())]
    assert len(victims) == 1, f"rank {rank}: {victims}\n{stack.log_tail()}"
    victims[0].kill()
