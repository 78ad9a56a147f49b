"""fault_tolerance.mode in_place on the real stack: a rank killed with SIGKILL is replaced alone, forked
warm on its machine, while the other ranks keep running (same pids) and hand it their state from
memory; the job completes in its first attempt with the model an uninterrupted run of the same job
ends with."""

from __future__ import annotations

import re

FINAL = {"completed", "failed", "stopped"}
SPEC = {
    "name": "in-place",
    "entrypoint": "examples/mlp_ddp.py",
    "args": ["--steps", "200", "--step-sleep", "0.03", "--report-every", "10"],
    "resources": {"nodes": 2, "procs_per_node": 1},
    "fault_tolerance": {"mode": "in_place", "max_restarts": 2},
}
EVAL = re.compile(r"rank (\d+): eval loss ([0-9.]+) at step (\d+)")


def eval_losses(stack, job_id: int) -> dict[int, str]:
    """Each rank's evaluation loss at the last step, as printed (six decimals): equal weights print equal."""
    found = {}
    for event in stack.logs(job_id):
        match = EVAL.search(event["line"])
        if match and match.group(3) == "200":
            found[int(match.group(1))] = match.group(2)
    return found


def wait_step(stack, job_id: int, rank: int, step: int, attempt: int = 0) -> None:
    """Until `rank` reported a metric at `step` or later (listening to the job's metric events)."""
    def reached() -> bool:
        return any(e.get("rank") == rank and e["step"] >= step and e["attempt"] == attempt
                   for e in stack.events(job_id, "metric"))

    assert stack.watch_job(job_id, reached, 180, on=frozenset({"metric"})), stack.job_log_tail(job_id)


def rank_pids(stack, job_id: int) -> dict[str, int]:
    return {p.environ()["RANK"]: p.pid for p in stack.job_processes(job_id)
            if "mlp_ddp.py" in " ".join(p.cmdline()) and p.environ().get("RANK") is not None}


def test_a_killed_rank_is_replaced_in_place_and_the_others_keep_running(pg_stack):
    pg_stack.wait_warm()
    reference = pg_stack.submit(dict(SPEC, name="in-place-reference"))
    job = pg_stack.submit(SPEC)
    wait_step(pg_stack, job["id"], rank=1, step=40)
    before = rank_pids(pg_stack, job["id"])
    assert set(before) == {"0", "1"}, before
    pg_stack.kill_rank(job["id"], "1", "0")
    # The replacement reports steps past the kill; rank 0 is the same process throughout.
    killed_at = max(e["step"] for e in pg_stack.events(job["id"], "metric") if e.get("rank") == 1)
    wait_step(pg_stack, job["id"], rank=1, step=killed_at + 20)
    during = rank_pids(pg_stack, job["id"])
    assert during["0"] == before["0"] and during["1"] != before["1"], (before, during)

    final = pg_stack.wait_job(job["id"], FINAL, timeout=240)
    assert final["status"] == "completed", f"{final['status_reason']}\n{pg_stack.job_log_tail(job['id'])}"
    assert final["attempt"] == 0 and final["restarts"] == 0, final
    lines = [e["line"] for e in pg_stack.logs(job["id"])]
    replaced = [line for line in lines if "replaced in place" in line]
    assert len(replaced) == 1 and f"pid {before['1']})" in replaced[0], replaced
    assert any("rank 1: in_place fault tolerance (torchft), replacing a rank that died" in line for line in lines)
    # On the timeline: node 1 goes on running, its rank replaced; the job never left running.
    states = pg_stack.events(job["id"], "state")
    assert [e["status"] for e in states if e.get("scope") == "job"] == [
        "queued", "planning", "dispatching", "running", "completed"]
    said = [e for e in states if e.get("scope") == "node" and "replaced in place" in e["reason"]]
    assert [(e["status"], e["node_rank"]) for e in said] == [("running", 1)], said
    metrics = [e for e in pg_stack.events(job["id"], "metric") if e.get("rank") == 0]
    assert max(e["step"] for e in metrics) == 200

    # The model is the one an uninterrupted run of the same job ends with.
    done = pg_stack.wait_job(reference["id"], FINAL, timeout=240)
    assert done["status"] == "completed", pg_stack.job_log_tail(reference["id"])
    expected = eval_losses(pg_stack, reference["id"])
    assert set(expected) == {0, 1} and len(set(expected.values())) == 1, expected
    assert eval_losses(pg_stack, job["id"]) == expected
    assert pg_stack.wait_no_job_processes(job["id"]) == []
    assert pg_stack.wait_no_job_processes(reference["id"]) == []
