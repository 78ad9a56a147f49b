"""Every write to the usage ledgers. The jobs app calls the node ones from its node transitions (a
node that starts running opens a row, its end closes it), inside the transition's transaction: a
transition that rolls back leaves no row, and one that commits leaves exactly one. The goodput
ledger is written by reports/goodput_ledger.py, which computes each ended job's split."""

from __future__ import annotations

import datetime as dt

from .models import JobGoodput, LedgerAttempt, NodeUsage


def usage_open(*, node_id: int, job_id: int, attempt: int, user_id: int | None, username: str,
               project_id: int | None, project_name: str, machine_id: int | None, machine_name: str,
               gpus: int, processes: int, started_at: dt.datetime) -> None:
    """A node started running: account for what it holds from `started_at` on. Idempotent: a node
    runs once, its row is kept as first written."""
    NodeUsage.objects.get_or_create(node_id=node_id, defaults={
        "job_id": job_id, "attempt": attempt, "user_id": user_id, "username": username, "project_id": project_id,
        "project_name": project_name, "machine_id": machine_id, "machine_name": machine_name, "gpus": gpus,
        "processes": processes, "started_at": started_at,
    })


def usage_close(*, node_id: int, ended_at: dt.datetime) -> bool:
    """A node ended: stop its clock. Conditional on the row being open, so a second report of the
    same end changes nothing. False when the node never ran (no row) or was closed already."""
    row = NodeUsage.objects.filter(node_id=node_id, ended_at=None).values("started_at", "gpus", "processes").first()
    if row is None:
        return False
    seconds = max((ended_at - row["started_at"]).total_seconds(), 0.0)
    return bool(NodeUsage.objects.filter(node_id=node_id, ended_at=None).update(
        ended_at=ended_at, gpu_seconds=row["gpus"] * seconds, process_seconds=row["processes"] * seconds))


def usage_open_node_ids() -> list[int]:
    return list(NodeUsage.objects.filter(ended_at=None).values_list("node_id", flat=True))


def usage_close_many(*, ends: dict[int, dt.datetime]) -> int:
    """Close the rows of nodes that ended without their transition closing them (a job deleted
    while a node was still counted live): node id -> when it ended."""
    return sum(usage_close(node_id=node_id, ended_at=ended_at) for node_id, ended_at in ends.items())


def goodput_record(*, job_id: int, job_name: str, user_id: int | None, username: str, project_id: int | None,
                   project_name: str, created_at: dt.datetime, finished_at: dt.datetime, wall_seconds: float,
                   parts: dict[str, float], attempts: list[LedgerAttempt], rules: int) -> JobGoodput:
    """An ended job's goodput split, into the ledger (reports/goodput_ledger.py computes it). Written
    again only by newer rules: the same job folded by two processes at once writes the same row."""
    row, _ = JobGoodput.objects.update_or_create(job_id=job_id, defaults={
        "job_name": job_name, "user_id": user_id, "username": username, "project_id": project_id,
        "project_name": project_name, "created_at": created_at, "finished_at": finished_at,
        "wall_seconds": wall_seconds, "parts": parts, "attempts": attempts, "rules": rules,
    })
    return row
