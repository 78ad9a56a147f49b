"""The jobs an embedded stack finds when it starts after one that ended without its stop sequence
(torchyard_server/generations.py finds the processes; this settles the records).

A node whose supervisor still runs and is re-attached keeps its place: its heartbeat clock starts
again now, since the supervisor could not report while the control plane was down and reports again
once it reconnects. Every other node the records call live on the stack's own machines is gone (it
ended, or was ended, while nobody listened): its job is interrupted as the stop sequence would have
interrupted it (recovering, no restart used) and resumes from its last checkpoint.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from django.db import transaction
from django.utils import timezone
from torchyard import protocol

from ..models import Job, JobNode
from ..states import NODE_LIVE, J, transition_job
from .reports import node_report_state

REASON = ("interrupted: Torchyard ended without stopping its jobs (killed?); "
          "it resumes from the last checkpoint")


def nodes_reattach(*, node_ids: Iterable[int]) -> int:
    """Give re-attached nodes a fresh heartbeat clock; how many were live."""
    return JobNode.objects.filter(pk__in=list(node_ids), status__in=NODE_LIVE).update(last_heartbeat=timezone.now())


def jobs_resume_lost_nodes(*, machine_names: Iterable[str], alive_node_ids: Iterable[int]) -> tuple[list[int], set[int]]:
    """Interrupt each job with a live node on `machine_names` whose supervisor is not among
    `alive_node_ids`, and record its nodes there stopped. Returns the jobs interrupted, and the nodes
    among `alive_node_ids` that belong to them: the caller ends those supervisors (the job's next
    attempt starts every node again, from the checkpoint)."""
    alive = set(alive_node_ids)
    local = JobNode.objects.filter(machine__name__in=list(machine_names), status__in=NODE_LIVE)
    job_ids = sorted(set(local.exclude(pk__in=alive).values_list("job_id", flat=True)))
    interrupted = []
    for job_id in job_ids:
        with transaction.atomic():
            job = Job.objects.select_for_update().get(pk=job_id)
            if job.status in (J.DISPATCHING, J.RUNNING) and transition_job(job, J.RECOVERING, REASON):
                interrupted.append(job_id)
    ended = list(local.filter(job_id__in=job_ids).values_list("pk", flat=True))
    for node_id in ended:
        # As if its supervisor had reported it: the recovery goes on once the job's last node is down.
        node_report_state(event={"type": protocol.STATE, "scope": "node", "node": node_id, "status": protocol.NODE_STOPPED,
                                 "reason": "Torchyard started again without it", "ts": time.time()})
    return interrupted, alive & set(ended)


def nodes_matching(*, nodes: Iterable[tuple[int, int, int]]) -> set[int]:
    """The ids among (node id, job id, attempt) that name a live node of that job and attempt here
    (a supervisor's launch may come from another database)."""
    found = set()
    for node_id, job_id, attempt in nodes:
        if JobNode.objects.filter(pk=node_id, job_id=job_id, attempt=attempt, status__in=NODE_LIVE).exists():
            found.add(node_id)
    return found
