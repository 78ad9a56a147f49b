from __future__ import annotations

from django.db import models


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
        PREFLIGHT = "preflight"
        STALLED = "stalled"

    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="events")
    node = models.ForeignKey("jobs.JobNode", on_delete=models.SET_NULL, null=True, blank=True, related_name="events")
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
        node, _, seq = self.dedupe_key.partition(":")
        return int(seq) if node.startswith("n") and seq.isdigit() else None

    def as_message(self) -> dict:
        """The wire shape: {"id", "job", "node", "node_rank", "rank", "seq", "type", "ts", ...payload}.
        (node, seq) lets a client check that every event of a supervisor arrived, once."""
        return {
            **self.payload,
            "id": self.pk,
            "job": self.job_id,
            "node": self.node_id,
            "node_rank": self.node_rank,
            "rank": self.rank,
            "attempt": self.attempt,
            "seq": self.seq,
            "type": self.type,
            "ts": self.ts.isoformat(),
        }
