"""How fast a job goes and when it should be done, folded into `job.progress` from its metric events.

- `total_steps`: what the script declared (`sdk.set_total_steps(n)`, or `report(total_steps=n)`,
  which every later report repeats); before that, a `--steps` argument of the spec (job_submit).
- `steps_per_second`: over the current attempt, from the first step it reported to the latest, by
  the events' own timestamps (a backlog in ingest does not bend it). A resumed attempt starts again
  from its checkpoint, so the previous attempt's pace does not count.
- `samples_per_second`: every rank's latest `samples_per_second`, summed; a script that reports none
  has its `throughput` taken for samples/s (the recipes report samples/s there).
- `eta_seconds`: (total_steps - step) / steps_per_second.

Per-attempt state (`rate_anchor`, `samples_by_rank`) is cleared at dispatch with the ranks' other
per-attempt numbers (JobProgress.for_new_attempt).
"""

from __future__ import annotations

import time

from torchyard.stream_contract import MetricEvent

from ..spec.progress import JobProgress


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def fold_rates(progress: JobProgress, metrics: list[MetricEvent]) -> None:
    """Update `progress` in place from a batch of one job's metric events (each with its rank and ts)."""
    declared = [int(m["total_steps"]) for m in metrics
                if isinstance(m.get("total_steps"), int) and not isinstance(m["total_steps"], bool) and m["total_steps"] > 0]
    if declared:
        progress.total_steps = declared[-1]

    timed = sorted(((m["step"], _number(m.get("ts")) or time.time()) for m in metrics
                    if isinstance(m.get("step"), int) and not isinstance(m["step"], bool)), key=lambda st: st[1])
    if timed:
        anchor = progress.rate_anchor or {"step": timed[0][0], "ts": timed[0][1]}
        progress.rate_anchor = anchor
        last_step, last_ts = max(timed, key=lambda st: (st[0], st[1]))
        if last_ts > anchor["ts"] and last_step > anchor["step"]:
            progress.steps_per_second = (last_step - anchor["step"]) / (last_ts - anchor["ts"])

    samples: dict[str, float] = dict(progress.samples_by_rank or {})
    for m in metrics:
        rate = _number(m.get("samples_per_second"))
        if rate is None:
            rate = _number(m.get("throughput"))
        if rate is not None:
            samples[str(m.get("rank"))] = rate
    if samples:
        progress.samples_by_rank = samples
        progress.samples_per_second = sum(samples.values())

    total, step, rate = progress.total_steps, progress.step, progress.steps_per_second
    if isinstance(total, int) and isinstance(step, int) and rate:
        progress.eta_seconds = max(0.0, (total - step) / rate)
