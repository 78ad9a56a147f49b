"""What the control plane makes of `stalled` events: one view of the job's stalled ranks, and a
verdict only a view across every node can give.

A supervisor sees its own ranks stop (workers/torchyard/supervisor/stall.py). Whether that is one
slow rank (a straggler: the others moved on, or wait for it) or every rank stopped at the same step
together (a hung collective) needs the whole job: the ranks' last steps from their metrics
(`progress.step_by_rank`) and the stalled ranks reported so far. The verdict lives in
`job.progress["stall"]` for the current attempt and is cleared when the stalled ranks move again.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from .models import Job, JobNode


def classify_stall(stalled: dict[str, dict[str, Any]], steps: dict[str, int], world_size: int) -> tuple[str, str]:
    """(kind, summary): "collective" when every rank stopped at one step, "straggler" when the
    stalled ranks are behind others, "rank" otherwise (others may still be about to stop)."""
    at = {int(rank): int(info["step"]) for rank, info in stalled.items()}
    ranks = ", ".join(str(r) for r in sorted(at))
    others = {int(r): int(s) for r, s in steps.items() if int(r) not in at}
    if len(at) >= world_size and len(set(at.values())) == 1:
        kind = "collective"
        summary = f"all {world_size} ranks stopped together at step {next(iter(at.values()))}: a hung collective"
    elif others and max(others.values()) > max(at.values()):
        kind = "straggler"
        summary = (f"rank{'s' if len(at) > 1 else ''} {ranks} stalled at step {min(at.values())} while "
                   f"rank {max(others, key=lambda r: others[r])} reached step {max(others.values())}: a straggler")
    else:
        kind = "rank"
        summary = f"rank{'s' if len(at) > 1 else ''} {ranks} stalled at step {min(at.values())}"
    stopped = sorted(int(r) for r, info in stalled.items() if info.get("process_state") == "stopped")
    if stopped:
        summary += f"; the process of rank {', '.join(map(str, stopped))} is stopped (a signal, a debugger)"
    return kind, summary


def job_record_stall(*, job_id: int, event_id: int, attempt: int, node_id: int | None, rank: int | None,
                     payload: dict[str, Any]) -> None:
    """Fold one `stalled` event into the job's stall view (current attempt only)."""
    if rank is None:
        return
    with transaction.atomic():
        job = Job.objects.select_for_update().filter(pk=job_id).first()
        if job is None or job.attempt != attempt:
            return
        progress = dict(job.progress or {})
        stall = progress.get("stall") or {}
        if stall.get("attempt") != attempt:
            stall = {"attempt": attempt, "ranks": {}}
        node = JobNode.objects.filter(pk=node_id).values("machine_name", "node_rank").first() or {}
        stall["ranks"][str(rank)] = {
            "step": payload.get("step"),
            "stalled_for": payload.get("stalled_for"),
            "process_state": payload.get("process_state"),
            "last_line": payload.get("last_line"),
            "machine": node.get("machine_name"),
            "node_rank": node.get("node_rank"),
            "event": event_id,
        }
        stall["kind"], stall["summary"] = classify_stall(stall["ranks"], progress.get("step_by_rank") or {},
                                                         job.world_size or len(stall["ranks"]))
        progress["stall"] = stall
        Job.objects.filter(pk=job_id).update(progress=progress)


def clear_moved_ranks(progress: dict[str, Any], steps: dict[str, int]) -> None:
    """Drop from the stall view the ranks whose step moved past the one they stalled at."""
    stall = progress.get("stall")
    if not stall:
        return
    for rank, info in list(stall["ranks"].items()):
        if steps.get(rank, -1) > (info.get("step") or 0):
            del stall["ranks"][rank]
    if not stall["ranks"]:
        progress.pop("stall")
