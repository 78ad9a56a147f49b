"""DistroML (DistroML) end to end: its JobSpec with `dataset: digits` and a compression hook, run by
the built-in MLP recipe on the real stack. The bytes each rank sends per step reach the job's metrics
from the hooks' own counters and drop by the expected factor against plain all-reduce, and the
loss on the handwritten digits still falls under every hook."""

from __future__ import annotations

import pytest

STEPS = 60
HOOKS = {
    "none": {"hook": "none"},
    "powersgd": {"hook": "powersgd", "rank": 1, "start_iter": 2},
    "topk": {"hook": "topk", "ratio": 0.01},
}
# The recipe's MLP on digits: 64 -> 128 -> 128 -> 10, float32, one DDP bucket.
DENSE_BYTES = (64 * 128 + 128 + 128 * 128 + 128 + 128 * 10 + 10) * 4


@pytest.fixture(scope="module")
def runs(pg_stack) -> dict[str, list[dict]]:
    """The three jobs, submitted together; each hook's metric events once its job completed."""
    jobs = {
        name: pg_stack.submit({
            "name": f"digits-{name}", "model": "mlp", "dataset": "digits", "resources": {"workers": 2},
            "compression": compression, "args": ["--steps", str(STEPS), "--report-every", "10"],
            "fault_tolerance": {"max_restarts": 0},
        })
        for name, compression in HOOKS.items()
    }  # fmt: skip
    for job in jobs.values():
        final = pg_stack.wait_job(job["id"], {"completed", "failed", "stopped"}, timeout=240)
        assert final["status"] == "completed", pg_stack.job_log_tail(job["id"])
    return {name: pg_stack.events(job["id"], "metric") for name, job in jobs.items()}


def per_step_bytes(events: list[dict], rank: int) -> dict[int, float]:
    return {e["step"]: e["comm_bytes_per_step"] for e in events if e["rank"] == rank and "comm_bytes_per_step" in e}


def test_each_rank_reports_the_bytes_it_sends_and_compression_cuts_them(runs):
    for rank in (0, 1):
        plain = per_step_bytes(runs["none"], rank)
        assert set(plain) == set(range(10, STEPS + 1, 10)) and set(plain.values()) == {DENSE_BYTES}
        # Past its two plain steps PowerSGD sends P and Q (rank 1) for each weight and the biases
        # whole: 852 float32 for 26,122 (30.7x less); Top-K 1% sends 262 entries of 8 bytes (49.9x).
        powersgd = per_step_bytes(runs["powersgd"], rank)
        assert powersgd[10] == (2 * DENSE_BYTES + 8 * 852 * 4) / 10
        assert {powersgd[step] for step in range(20, STEPS + 1, 10)} == {852 * 4}
        assert set(per_step_bytes(runs["topk"], rank).values()) == {262 * 8}


def test_the_loss_on_the_digits_still_falls_under_every_hook(runs):
    for name, events in runs.items():
        for rank in (0, 1):
            losses = {e["step"]: e["loss"] for e in events if e["rank"] == rank}
            # A 10-class classifier starts near ln(10) = 2.3.
            assert losses[STEPS] < losses[10] and losses[STEPS] < 1.2, (name, rank, losses)
