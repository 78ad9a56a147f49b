"""`checkpointing.every_n_steps: auto` on the real stack: the built-in recipe saves first after the first
100 steps, then at the interval Young/Daly's rule gives from that save's cost and the machines' fault
history, which the job's log states with its reasons and its charts show (`checkpoint_interval_s`)."""

from __future__ import annotations

FINAL = {"completed", "failed", "stopped"}


def test_auto_cadence_saves_first_after_100_steps_and_says_what_it_chose_and_why(pg_stack):
    job = pg_stack.submit({
        "name": "cadence-auto", "entrypoint": "examples/mlp_ddp.py", "args": ["--steps", "160", "--step-sleep", "0.01"],
        "resources": {"nodes": 2, "procs_per_node": 1}, "checkpointing": {"every_n_steps": "auto"},
    })
    final = pg_stack.wait_job(job["id"], FINAL, timeout=180)
    assert final["status"] == "completed", f"{final['status_reason']}\n{pg_stack.job_log_tail(job['id'])}"
    steps = sorted(c["step"] for c in pg_stack.api("GET", f"/api/jobs/{job['id']}/checkpoints").json())
    assert steps[:1] == [100] and steps[-1] == 160, steps
    lines = [e["line"] for e in pg_stack.logs(job["id"])]
    assert any("checkpoint every auto (first after 100 steps)" in line for line in lines)
    chosen = [line for line in lines if "checkpoint cadence (auto): every" in line]
    assert chosen and "Young/Daly" in chosen[0] and "machine-hours on local-0, local-1" in chosen[0], chosen
    # On the job's charts from the first save on (and again whenever a save changes it by a quarter).
    interval = [e for e in pg_stack.events(job["id"], "metric") if "checkpoint_interval_s" in e]
    assert interval and interval[0]["step"] == 100 and interval[0]["checkpoint_interval_s"] > 0, interval
