"""Metric events folded into the job's and nodes' progress summaries."""

from __future__ import annotations

from django.db import transaction
from torchyard.stream_contract import MetricEvent

from ..models import Job, JobNode
from ..spec.progress import JobProgress, NodeProgress
from .rates import fold_rates
from .stalls import clear_moved_ranks


def job_record_progress(*, job_id: int, metrics: list[MetricEvent]) -> None:
    """Fold metric events into the job's and nodes' progress summaries (latest step wins).

    Under the job's row lock, as every writer of `progress` (stalls.job_record_stall, and dispatch,
    whose caller holds it): read unlocked, a fold racing a new attempt's dispatch wrote the old
    attempt's ranks back over its reset. Metrics of an earlier attempt (late in the stream) fold
    into nothing."""
    with transaction.atomic():
        job = Job.objects.select_for_update().filter(pk=job_id).first()
        if job is None:
            return
        metrics = [m for m in metrics if m.get("attempt", job.attempt) == job.attempt]
        if metrics:
            _fold_progress(job, metrics)
    # Each node's own latest report, outside the job's lock: taking node rows while holding it
    # could deadlock with a transition that takes them in the other order.
    latest = {node: m for m in metrics if (node := m.get("node"))}
    for node_id, m in latest.items():
        node_merge_progress(node_id, NodeProgress(step=m.get("step"), loss=m.get("loss"),
                                                  throughput=m.get("throughput")))


def node_merge_progress(node_id: int, update: NodeProgress) -> NodeProgress | None:
    """The one writer of a node's progress: `update`'s reported parts merged into what it holds,
    under its row lock; what it holds now (None: no such node). Two things write there, the node's
    `running` report (a Ray node's processes, `ray`) and the metric fold (step, loss, throughput);
    replacing the whole value lost the other's part."""
    if update == NodeProgress():
        return None
    with transaction.atomic():
        held = list(JobNode.objects.select_for_update().filter(pk=node_id).values_list("progress", flat=True))
        if not held:
            return None
        merged = NodeProgress.from_json(held[0] if isinstance(held[0], dict) else None).merged(update)
        JobNode.objects.filter(pk=node_id).update(progress=merged.to_json())
        return merged


def _fold_progress(job: Job, metrics: list[MetricEvent]) -> None:
    progress = JobProgress.from_json(job.progress)
    latest = max(metrics, key=lambda m: (m.get("step") or 0))
    if (step := latest.get("step")) is not None:
        progress.step = step
    if (loss := latest.get("loss")) is not None:
        progress.loss = loss
    if (throughput := latest.get("throughput")) is not None:
        progress.throughput = throughput
    if (lr := latest.get("lr")) is not None:
        progress.lr = lr
    # Ranks report their own throughput; the job's is the sum of every rank's latest report.
    by_rank: dict[str, float] = dict(progress.throughput_by_rank or {})
    for m in metrics:
        if m.get("throughput") is not None:
            by_rank[str(m.get("rank"))] = float(m["throughput"])
    if by_rank:
        progress.throughput_by_rank = by_rank
        progress.throughput = sum(by_rank.values())
    # Every rank's last step: stall verdicts compare a stalled rank with the others (stalls.py).
    steps: dict[str, int] = dict(progress.step_by_rank or {})
    for m in metrics:
        if isinstance(m.get("step"), int) and m.get("rank") is not None:
            steps[str(m["rank"])] = m["step"]
    progress.step_by_rank = steps
    clear_moved_ranks(progress, steps, job.world_size)
    fold_rates(progress, metrics)
    Job.objects.filter(pk=job.pk).update(progress=progress.to_json())
