"""checkpointing.memory on the real stack (two agents, two machines): every step's checkpoint kept in the
agents' memory, the saving machine's and its buddy's; a rank killed mid-run resumes from the newest of
them, read from the node's own machine, never from the store; with both copies gone the store's newest
checkpoint takes over, saying why."""

from __future__ import annotations

import re
import time

import requests

from .test_in_place import FINAL

SPEC = {
    "name": "memory-tier",
    "entrypoint": "examples/mlp_ddp.py",
    "args": ["--steps", "100000", "--step-sleep", "0.05", "--report-every", "1", "--log-every", "1000"],
    "resources": {"nodes": 2, "procs_per_node": 1},
    # The store's checkpoints every 60 steps, memory's every step.
    "checkpointing": {"enabled": True, "every_n_steps": 60, "memory": {"every_n_steps": 1, "replicas": 1,
                                                                      "budget": 64 << 20}},
    "fault_tolerance": {"max_restarts": 3},
}
RESUMED = re.compile(r"rank (\d+): resumed from checkpoint at step (\d+)")


def _last_step(stack, job_id: int, attempt: int) -> int:
    return max(e["step"] for e in stack.events(job_id, "metric") if e["attempt"] == attempt)


def _resumed(stack, job_id: int, attempt: int) -> dict[int, int]:
    found = {}
    for event in stack.logs(job_id):
        if event["attempt"] == attempt and (match := RESUMED.search(event["line"])):
            found[int(match.group(1))] = int(match.group(2))
    return found


def _wait_attempt_steps(stack, job_id: int, attempt: int) -> None:
    def both() -> bool:
        return {e.get("rank") for e in stack.events(job_id, "metric") if e["attempt"] == attempt} >= {0, 1}

    assert stack.watch_job(job_id, both, 180, on=frozenset({"metric"})), stack.job_log_tail(job_id)


def test_a_rank_killed_resumes_from_memory_and_from_the_store_once_memory_is_gone(pg_stack):
    job = pg_stack.submit(SPEC)
    job_id = job["id"]
    listed: list[dict] = []

    def both_tiers() -> bool:  # the store's first checkpoint is at step 60, memory's at every step
        listed[:] = pg_stack.api("GET", f"/api/jobs/{job_id}/checkpoints").json()
        return {c["tier"] for c in listed} == {"disk", "memory"}

    assert pg_stack.watch_job(job_id, both_tiers, 120, on=frozenset({"checkpoint"})), pg_stack.job_log_tail(job_id)
    memory = [c for c in listed if c["tier"] == "memory"]
    machines = {n["machine"]["name"] for n in pg_stack.job(job_id)["nodes"]}
    # Every file of a memory checkpoint is held by both machines: the saver's own and its buddy.
    assert memory and {tuple(sorted(f["holders"])) for c in memory for f in c["files"]} == {tuple(sorted(machines))}
    assert any(c["tier"] == "disk" for c in listed), listed

    # A rank killed: the attempt restarts from the newest memory checkpoint, one step or so behind.
    reached = _last_step(pg_stack, job_id, 0)
    pg_stack.kill_rank(job_id, "1", "0")
    _wait_attempt_steps(pg_stack, job_id, 1)
    current = pg_stack.job(job_id)
    dispatched = next(e for e in pg_stack.events(job_id, "state")
                      if e.get("scope") == "job" and e["status"] == "dispatching" and e["attempt"] == 1)
    assert f"resuming from memory://job-{job_id}/step-" in dispatched["reason"], dispatched
    resumed = _resumed(pg_stack, job_id, 1)
    assert set(resumed) == {0, 1} and len(set(resumed.values())) == 1, resumed
    step = resumed[0]
    assert step % 60 != 0 and step >= reached - 1, (step, reached)  # a memory step, not a store one
    lines = [e["line"] for e in pg_stack.logs(job_id) if e["attempt"] == 1]
    # Each node read its own machine's copy.
    assert any(f"resuming from the memory checkpoint at step {step}, held by " in line for line in lines), lines[-20:]
    assert not any("cannot be read" in line for line in lines), lines[-20:]
    assert current["status"] == "running", current

    # Both copies gone (as when both agents restarted): the next recovery falls back to the store.
    key = next(p.environ()["TORCHYARD_MEMORY_KEY"] for p in pg_stack.job_processes(job_id)
               if p.environ().get("TORCHYARD_MEMORY_KEY"))
    ports = [pg_stack.api("GET", f"/api/machines/{node['machine']['id']}").json()["capabilities"]["memory_port"]
             for node in current["nodes"] if node["attempt"] == 1]
    # Right after a memory checkpoint newer than the store's newest (one this attempt wrote), so that
    # the memory one is what the control plane picks: the store's next one is 60 steps away.
    seen: dict[str, int] = {}

    def memory_newer_than_disk() -> bool:
        rows = pg_stack.api("GET", f"/api/jobs/{job_id}/checkpoints").json()
        seen.update({tier: max((c["step"] for c in rows if c["tier"] == tier), default=0) for tier in ("disk", "memory")})
        return seen["disk"] > step and seen["memory"] > seen["disk"]

    assert pg_stack.watch_job(job_id, memory_newer_than_disk, 120, on=frozenset({"checkpoint"})), seen
    for port in ports:
        freed = requests.delete(f"http://127.0.0.1:{port}/jobs/{job_id}", headers={"Authorization": f"Bearer {key}"},
                                timeout=10)
        assert freed.status_code == 200, freed.text
    pg_stack.kill_rank(job_id, "0", "1")
    _wait_attempt_steps(pg_stack, job_id, 2)
    lines = [e["line"] for e in pg_stack.logs(job_id) if e["attempt"] == 2]
    assert any("cannot be read" in line and "resuming from the store's newest checkpoint instead" in line
               for line in lines), [line for line in lines if "resum" in line or "memory" in line]
    assert set(_resumed(pg_stack, job_id, 2).values()) == {seen["disk"]}, (_resumed(pg_stack, job_id, 2), seen)

    pg_stack.api("POST", f"/api/jobs/{job_id}/stop")
    assert pg_stack.wait_job(job_id, FINAL, timeout=120)["status"] == "stopped"
    assert pg_stack.wait_no_job_processes(job_id) == []
    # The job ended: its machines free what they held for it.
    deadline = time.monotonic() + 60
    for port in ports:
        while time.monotonic() < deadline and (held := requests.get(f"http://127.0.0.1:{port}/jobs/{job_id}", headers={"Authorization": f"Bearer {key}"},
                                    timeout=10)).status_code == 200:
            time.sleep(0.2)
        assert held.status_code == 404 and "holds no memory checkpoints" in held.json()["error"], held.text
