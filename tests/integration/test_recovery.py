"""When a rank dies, Torchyard stops the rest and resumes the whole job from the last committed
checkpoint by itself, up to fault_tolerance.max_restarts times."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

SPEC = {
    "name": "recover-me",
    "entrypoint": "examples/mlp_ddp.py",
    "resources": {"nodes": 2, "procs_per_node": 1},
    "checkpointing": {"enabled": True, "every_n_steps": 20, "keep": 2},
    "fault_tolerance": {"max_restarts": 1, "heartbeat_timeout": 10},
}
FINAL = {"completed", "failed", "stopped"}


# DDP's replicated checkpoints, and FSDP's sharded ones (torch.distributed.checkpoint, every rank's files).
@pytest.mark.parametrize("recipe", ["mlp_ddp.py", "mlp_fsdp.py"])
def test_a_killed_rank_is_recovered_from_the_last_checkpoint_and_the_job_completes(pg_stack, recipe):
    job = pg_stack.submit(dict(SPEC, entrypoint=f"examples/{recipe}", args=["--steps", "140", "--step-sleep", "0.05"]))
    checkpoint = pg_stack.wait_checkpoint(job["id"])
    before = {n["node_rank"]: n["machine_id"] for n in pg_stack.job(job["id"])["plan"]["nodes"]}
    pg_stack.kill_rank(job["id"], "1", "0", recipe)

    final = pg_stack.wait_job(job["id"], {"completed", "failed", "stopped"}, timeout=180)
    assert final["status"] == "completed", f"{final['status_reason']}\n{pg_stack.job_log_tail(job['id'])}"
    assert final["attempt"] == 1
    states = [e["status"] for e in pg_stack.events(job["id"], "state") if e.get("scope") == "job"]
    assert states == ["queued", "planning", "dispatching", "running", "recovering", "dispatching", "running",
                      "completed"]
    recovering = [e for e in pg_stack.events(job["id"], "state") if e.get("status") == "recovering"][0]
    assert "node 1 (local-1)" in recovering["reason"]
    # Its machines are healthy: recovered in place, every node where it was, no new plan.
    relaunch = [e for e in pg_stack.events(job["id"], "state") if e.get("scope") == "job"
                and e["status"] == "dispatching" and e["attempt"] == 1][0]
    assert relaunch["reason"].startswith("in place on the same machines; launching 2 node(s)"), relaunch["reason"]
    assert {n["node_rank"]: n["machine"]["id"] for n in final["nodes"]} == before, final["nodes"]

    logs = pg_stack.logs(job["id"])
    resumed = [e for e in logs if e["attempt"] == 1 and "resumed from checkpoint at step" in e["line"]]
    assert {e["rank"] for e in resumed} == {0, 1}
    resumed_step = int(resumed[0]["line"].rsplit(" ", 1)[-1])
    assert resumed_step >= checkpoint["step"] > 0
    second = [e["step"] for e in pg_stack.events(job["id"], "metric") if e["attempt"] == 1]
    assert min(second) > resumed_step and max(second) == 140
    # Its goodput (reports/goodput.py): the wall time split from its events, the recovery in it.
    goodput = pg_stack.api("GET", f"/api/jobs/{job['id']}/goodput").json()
    assert (goodput["parts"]["training"] > 0 and goodput["parts"]["recovery"] > 0
            and [a["attempt"] for a in goodput["attempts"]] == [0, 1]
            and sum(goodput["parts"].values()) == pytest.approx(goodput["wall_seconds"], rel=0.01)), goodput
    assert pg_stack.wait_no_job_processes(job["id"]) == []
    if recipe == "mlp_fsdp.py":
        assert {f["path"] for f in checkpoint["files"]} >= {".metadata", "__0_0.distcp", "__1_0.distcp"}


def test_the_job_fails_once_its_restarts_are_used_up(pg_stack):
    job = pg_stack.submit(dict(SPEC, name="fail-twice", args=["--steps", "100000", "--step-sleep", "0.05"]))
    pg_stack.wait_checkpoint(job["id"])
    pg_stack.kill_rank(job["id"], "0", "0")
    deadline = time.monotonic() + 120
    while not any(e["attempt"] == 1 for e in pg_stack.events(job["id"], "metric")):
        assert time.monotonic() < deadline, f"attempt 1 never trained:\n{pg_stack.log_tail()}"
        time.sleep(0.5)
    pg_stack.kill_rank(job["id"], "0", "1")
    final = pg_stack.wait_job(job["id"], {"completed", "failed", "stopped"}, timeout=90)
    assert final["status"] == "failed"
    assert "gave up after 1 restart" in final["status_reason"]
    assert pg_stack.wait_no_job_processes(job["id"]) == []


def test_a_node_that_goes_silent_is_declared_lost_and_the_job_recovers(pg_stack):
    """A whole machine dying looks like this from the control plane: its node stops reporting.
    Killing the node's supervisor with SIGKILL takes its torchrun down with it and reports nothing.
    (One node, so that no peer notices the loss first through a broken collective.)"""
    spec = dict(SPEC, name="goes-silent", args=["--steps", "160", "--step-sleep", "0.05"],
                resources={"nodes": 1, "procs_per_node": 1},
                fault_tolerance={"max_restarts": 1, "heartbeat_timeout": 4})
    job = pg_stack.submit(spec)
    pg_stack.wait_checkpoint(job["id"])
    run_dir = f"job-{job['id']}/attempt-0/node-0"
    supervisors = [p for p in psutil.process_iter(["cmdline"])
                   if "torchyard.supervisor" in " ".join(p.info["cmdline"] or [])
                   and str(pg_stack.data_dir) in " ".join(p.info["cmdline"]) and run_dir in " ".join(p.info["cmdline"])]
    assert len(supervisors) == 1
    supervisors[0].kill()

    final = pg_stack.wait_job(job["id"], {"completed", "failed", "stopped"}, timeout=180)
    assert final["status"] == "completed", final["status_reason"]
    assert final["attempt"] == 1 and final["restarts"] == 1
    recovering = [e for e in pg_stack.events(job["id"], "state") if e.get("status") == "recovering"][0]
    assert "lost: no heartbeat for 4s" in recovering["reason"]
    lost = [e for e in pg_stack.events(job["id"], "state") if e.get("scope") == "node" and e["status"] == "lost"]
    assert [(e["node_rank"], e["attempt"]) for e in lost] == [(0, 0)]
    assert pg_stack.wait_no_job_processes(job["id"]) == []


def cli(stack, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TORCHYARD_SERVER=stack.base, TORCHYARD_TOKEN=stack.token)
    return subprocess.run([str(Path(sys.executable).parent / "torchyard"), *args], capture_output=True, text=True,
                          timeout=60, env=env)


def test_a_sigstopped_rank_is_named_its_machine_quarantined_and_the_operators_release_resumes_the_job(pg_stack):
    """2 nodes x 2 ranks; rank 1 (node 0's second, neither the first rank nor the last) is SIGSTOPped
    mid-run. Every rank stalls; the verdict names rank 1 and its machine from its process state, the
    others wait in a collective; on_stall: recover ends the attempt and quarantines its machine. With
    only the other machine left, the job waits in the queue saying why; the operator's release brings
    the machine back and the job trains again on both."""
    spec = dict(SPEC, name="sigstop-culprit", args=["--steps", "100000", "--step-sleep", "0.05"],
                resources={"nodes": 2, "procs_per_node": 2}, checkpointing={"enabled": False},
                fault_tolerance={"max_restarts": 1, "heartbeat_timeout": 10, "stall_timeout": 3, "on_stall": "recover"})
    job = pg_stack.submit(spec)
    stopped: psutil.Process | None = None
    held = ""
    try:
        deadline = time.monotonic() + 180
        while not any(e["attempt"] == 0 and e["step"] >= 20 for e in pg_stack.events(job["id"], "metric")):
            assert time.monotonic() < deadline, f"attempt 0 never trained:\n{pg_stack.job_log_tail(job['id'])}"
            time.sleep(0.5)
        [stopped] = [p for p in pg_stack.job_processes(job["id"])
                     if p.environ().get("RANK") == "1" and p.environ().get("TORCHYARD_ATTEMPT") == "0"
                     and "mlp_ddp.py" in " ".join(p.cmdline()) and "torch.distributed.run" not in " ".join(p.cmdline())]
        stopped.suspend()
        held = next(n["machine_name"] for n in pg_stack.job(job["id"])["plan"]["nodes"] if n["node_rank"] == 0)
        other = next(n["machine_name"] for n in pg_stack.job(job["id"])["plan"]["nodes"] if n["node_rank"] == 1)

        # The recovery cannot place 2 nodes on the one machine left: it waits in the queue, saying why.
        def waits() -> bool:
            detail = pg_stack.job(job["id"])
            assert detail["status"] not in FINAL, json.dumps(detail)[:3000]
            return detail["status"] == "queued" and f"{held} quarantined" in detail["status_reason"]

        assert pg_stack.watch_job(job["id"], waits, timeout=120), json.dumps(pg_stack.job(job["id"]))[:3000]
        verdict = f"rank 1 on machine {held} (process stopped, SIGSTOP?) holds the job: ranks 0, 2, 3 wait"
        stalls = {e["rank"]: e for e in pg_stack.events(job["id"], "stalled") if e["attempt"] == 0}
        # Its process state names it, wherever its stack stopped (in its sleep, or inside backward).
        assert stalls[1]["process_state"] == "stopped", stalls[1]
        # The job set its deadline, and the evidence says so.
        assert stalls[1]["timeout"] == 3 and stalls[1]["timeout_basis"] == "stall_timeout 3 s, set by the job", stalls[1]
        # Rank 0, examined in the same pass as rank 1 (its node's), waits on its peers: in DDP's all-reduce
        # (inside backward) or, when the stop caught rank 1 past it, in the script's own all_reduce. The
        # other node's ranks may be examined only once rank 1's node has ended its ranks, when they are
        # already on their way out: what they show then is no evidence either way.
        assert any(where in (stalls[0]["waits_in"] or "") for where in ("torch/autograd/", "torch/distributed/")), stalls
        recovering = next(e for e in pg_stack.events(job["id"], "state")
                          if e.get("scope") == "job" and e["status"] == "recovering")
        assert f"stall verdict: {verdict}" in recovering["reason"], recovering["reason"]

        machines = {m["name"]: m for m in pg_stack.api("GET", "/api/machines").json()}
        assert machines[held]["status"] == "quarantined" and machines[other]["quarantined_at"] is None, machines
        assert machines[held]["quarantine_job"] == job["id"], machines[held]
        assert machines[held]["quarantine_reason"].startswith(f"rank 1 on machine {held} (process stopped, SIGSTOP?) "
                                                              f"held job #{job['id']} (attempt 0)"), machines[held]

        # The operator sees why with the CLI and releases it there: the job is placed on both machines
        # again and trains.
        listed = cli(pg_stack, "machines")
        assert listed.returncode == 0 and f"torchyard machines release {held}" in listed.stdout, listed.stdout
        assert "quarantined since " in listed.stdout and f"(job {job['id']}): rank 1 on machine {held}" in listed.stdout
        released = cli(pg_stack, "machines", "release", held)
        assert released.returncode == 0, released.stdout + released.stderr
        assert released.stdout.strip() == f"{held} released from quarantine: online", released.stdout
        assert pg_stack.watch_job(job["id"], lambda: any(e["attempt"] >= 1 for e in pg_stack.events(job["id"], "metric")),
                                  timeout=120, on=frozenset({"state", "metric"})), pg_stack.job_log_tail(job["id"])
        assert {n["machine_name"] for n in pg_stack.job(job["id"])["plan"]["nodes"]} == {held, other}
    finally:
        pg_stack.api("POST", f"/api/jobs/{job['id']}/stop")
        if stopped is not None and stopped.is_running():
            stopped.resume()  # on_stall: recover killed it; were it left, SIGCONT lets the stop end it
        # The module's other jobs plan on both machines in name order again.
        for machine in pg_stack.api("GET", "/api/machines").json():
            if machine["quarantined_at"]:
                assert pg_stack.api("PATCH", f"/api/machines/{machine['id']}", json={"quarantined": False}).ok
    pg_stack.wait_job(job["id"], FINAL, timeout=90)
    assert pg_stack.wait_no_job_processes(job["id"]) == []
