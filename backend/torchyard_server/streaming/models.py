from __future__ import annotations

import datetime as dt
from typing import Any, cast

from django.db import models
from torchyard import stream_contract as contract


class JobEvent(models.Model):
    """The persisted event stream of a job (DESIGN.md section 6).

    `id` is the resume cursor: the controller's ingest loop is the only writer, so ids grow in the
    order events were accepted and a client that saw id N has seen everything before it.
    """

    class Type(models.TextChoices):
        STATE = "state"
        LOG = "log"
        METRIC = "metric"
        RESOURCE = "resource"
        CHECKPOINT = "checkpoint"
        ARTIFACT = "artifact"
        RESULT = "result"
        PREFLIGHT = "preflight"
        STALLED = "stalled"
        STACKS = "stacks"
        PACE = "pace"
        STRAGGLER = "straggler"

    # No foreign-key constraints in the database: checking two per row at every commit halved the
    # rate at which ingest, the only writer, stores events (it checks that the job and the node
    # exist itself). Deleting a job or a node goes through the ORM, which cascades (or nulls) here.
    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="events", db_constraint=False)
    node = models.ForeignKey("jobs.JobNode", on_delete=models.SET_NULL, null=True, blank=True, related_name="events",
                             db_constraint=False)
    attempt = models.PositiveIntegerField(default=0)
    node_rank = models.PositiveIntegerField(null=True, blank=True)
    rank = models.PositiveIntegerField(null=True, blank=True)
    type = models.CharField(max_length=16, choices=Type.choices)
    ts = models.DateTimeField()
    payload = models.JSONField(default=dict)
    # "n<node>:<seq>" for supervisor events, "c<uuid>" for the controller's: makes ingest idempotent.
    dedupe_key = models.CharField(max_length=80, unique=True)

    class Meta:
        ordering = ["id"]
        indexes = [
            models.Index(fields=["job", "id"], name="event_job_cursor"),
            models.Index(fields=["job", "type", "id"], name="event_job_type_cursor"),
        ]

    def __str__(self) -> str:
        return f"{self.type} #{self.pk} job {self.job_id}"

    @property
    def seq(self) -> int | None:
        """The supervisor's own number for this event (1, 2, ... per node, without gaps), from the
        dedupe key; None for the controller's and agents' events."""
        return seq_of(self.dedupe_key)

    def as_message(self) -> contract.JobEvent:
        """The wire shape: {"id", "job", "node", "node_rank", "rank", "seq", "type", "ts", ...payload}.
        (node, seq) lets a client check that every event of a supervisor arrived, once."""
        return event_message(pk=self.pk, job_id=self.job_id, node_id=self.node_id, node_rank=self.node_rank,
                             rank=self.rank, attempt=self.attempt, dedupe_key=self.dedupe_key, type=self.type,
                             ts=self.ts, payload=self.payload)


def seq_of(dedupe_key: str) -> int | None:
    node, _, seq = dedupe_key.partition(":")
    return int(seq) if node.startswith("n") and seq.isdigit() else None


def event_message(*, pk: int, job_id: int, node_id: int | None, node_rank: int | None, rank: int | None, attempt: int,
                  dedupe_key: str, type: str, ts: dt.datetime, payload: dict[str, Any]) -> contract.JobEvent:
    """JobEvent.as_message from a row's values: what ingest sends without building a model. The
    payload is the rest of the event as its producer wrote it (the stream contract types them)."""
    return cast("contract.JobEvent", {
        **payload,
        "id": pk,
        "job": job_id,
        "node": node_id,
        "node_rank": node_rank,
        "rank": rank,
        "attempt": attempt,
        "seq": seq_of(dedupe_key),
        "type": type,
        "ts": ts.isoformat(),
    })
