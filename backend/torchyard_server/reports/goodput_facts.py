"""The facts a goodput split is computed from (reports/goodput.py), read for many jobs at once: a
few queries whatever their number. Metric events are read grouped, the first moment of each step of
each attempt; log events only as the preparation's lines that mark its phases."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db.models import Min, Q
from django.db.models.fields.json import KT

from ..checkpoints.models import CheckpointManifest
from ..jobs.models import Job
from ..streaming.models import JobEvent
from .goodput import Checkpoint, JobFacts, JobState, NodeState, PrepareLine, Progress, Stall

E = JobEvent.Type
# The preparation's lines a phase begins or ends with (goodput.py reads them; workers' bundles/cache.py
# and node/environments.py write them), from its own sources only.
PREPARE_SOURCES = ("prepare", "pip")
PREPARE_OPENINGS = ("creating environment ", "environment ", "working directory from code bundle")


def _epoch(moment: dt.datetime) -> float:
    return moment.timestamp()


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number == number else None  # NaN is no number


def job_facts(jobs: list[Job], *, now: dt.datetime) -> dict[int, JobFacts]:
    """Each job's facts, by id: its rows, its events' and its checkpoints'."""
    facts = {
        job.pk: JobFacts(
            created=_epoch(job.created_at), end=_epoch(job.finished_at or now), status=job.status,
            started=_epoch(job.started_at) if job.started_at else None,
            heartbeat_timeout=_heartbeat_timeout(job.spec),
        )
        for job in jobs
    }
    if not facts:
        return facts
    ids = list(facts)
    events = JobEvent.objects.filter(job_id__in=ids).order_by()
    states = events.filter(type=E.STATE).values_list(
        "job_id", "node_id", "attempt", "ts", KT("payload__scope"), KT("payload__status"), KT("payload__reason"))
    for job_id, node_id, attempt, ts, scope, status, reason in states.order_by("id").iterator(chunk_size=5000):
        if not status:
            continue
        # Without a scope (rows stored before events had one): a node's if it names a node.
        if node_id is not None and scope in ("node", None):
            facts[job_id].node_states.append(NodeState(_epoch(ts), node_id, attempt, status, reason or ""))
        elif scope in ("job", None):
            facts[job_id].states.append(JobState(_epoch(ts), status, attempt, reason or ""))
    steps = (events.filter(type=E.METRIC).annotate(step=KT("payload__step")).values("job_id", "attempt", "step")
             .annotate(first=Min("ts")))
    for row in steps.iterator(chunk_size=10000):
        step = _number(row["step"])
        if step is not None and step >= 0:
            facts[row["job_id"]].progress.append(Progress(_epoch(row["first"]), row["attempt"], int(step)))
    opening = Q()
    for text in PREPARE_OPENINGS:
        opening |= Q(line__startswith=text)
    lines = (events.filter(type=E.LOG, node__isnull=False, rank__isnull=True)
             .annotate(source=KT("payload__source"), line=KT("payload__line"))
             .filter(opening, source__in=PREPARE_SOURCES).values_list("job_id", "node_id", "attempt", "ts", "line"))
    for job_id, node_id, attempt, ts, line in lines.iterator(chunk_size=5000):
        facts[job_id].prepare.append(PrepareLine(_epoch(ts), node_id, attempt, line))
    stalls = events.filter(type=E.STALLED).values_list(
        "job_id", "attempt", "ts", KT("payload__stalled_for"), KT("payload__on_stall"))
    for job_id, attempt, ts, stalled_for, on_stall in stalls.iterator(chunk_size=5000):
        facts[job_id].stalls.append(Stall(_epoch(ts), attempt, _number(stalled_for) or 0.0, on_stall or "report"))
    # Deleted ones too: retention removed their files, not the time their saves took.
    manifests = CheckpointManifest.objects.filter(job_id__in=ids).order_by().values_list(
        "job_id", "attempt", "step", "uri", "committed_at", "blocking_seconds", "background_seconds", "saved_async")
    for job_id, attempt, step, uri, committed, blocking, background, saved_async in manifests.iterator(chunk_size=5000):
        facts[job_id].checkpoints.append(Checkpoint(attempt, step, uri, _epoch(committed), blocking, background,
                                                    saved_async))
    return facts


def _heartbeat_timeout(spec: Any) -> float:
    section = spec.get("fault_tolerance") if isinstance(spec, dict) else None
    timeout = _number(section.get("heartbeat_timeout")) if isinstance(section, dict) else None
    return timeout if timeout and timeout > 0 else 10.0
