from __future__ import annotations

import typing
from collections.abc import Callable

from rest_framework import serializers
from torchyard import stream_contract as contract

from .models import JobEvent


def _envelope_fields() -> dict[str, serializers.Field]:
    """EventOut's fields: the stream contract's envelope as the routes send it (EVENT_ENVELOPE), each
    field of EventEnvelope made from its type (an int, or an int or null), with the event's type and
    its time (stored as a datetime, sent as ISO 8601)."""
    hints = typing.get_type_hints(contract.EventEnvelope)
    # Made in EVENT_ENVELOPE's order: DRF orders a serializer's fields by when they were made.
    special: dict[str, Callable[[], serializers.Field]] = {
        "type": lambda: serializers.ChoiceField(choices=JobEvent.Type.choices),
        "ts": serializers.DateTimeField,
    }
    fields = {}
    for name in contract.EVENT_ENVELOPE:
        if name in special:
            fields[name] = special[name]()
            continue
        nullable = type(None) in typing.get_args(hints[name])
        fields[name] = serializers.IntegerField(allow_null=nullable, **_ENVELOPE_HELP.get(name, {}))
    return fields


_ENVELOPE_HELP = {"id": {"help_text": "the resume cursor: ids grow in the order events were accepted"},
                  "seq": {"help_text": "the node supervisor's own number for it (1, 2, ... per node)"}}

EventOut = type("EventOut", (serializers.Serializer,), {
    "__module__": __name__, **_envelope_fields(),
    "__doc__": """One event of a job (DESIGN.md section 6): these fields, plus its type's own (a log's `line`
    and `stream`, a metric's `step` and numbers, a state's `status` and `reason`, ...).""",
})


class EventPageOut(serializers.Serializer):
    events = EventOut(many=True)
    next_after = serializers.IntegerField(help_text="pass as `after` for the events that follow")


class LogStreamEventOut(serializers.Serializer):
    """One Server-Sent Event of `/api/jobs/{id}/logs/stream`, its fields as the SSE format names them."""

    event = serializers.ChoiceField(choices=["log", "end"])
    id = serializers.CharField(required=False, help_text="a log event's id (EventSource's Last-Event-ID)")
    data = serializers.CharField(help_text=(
        "JSON: a log event, as /api/jobs/{id}/logs shows it; at the end, the job's "
        "{job, status, status_reason, last_id}"))
    retry = serializers.IntegerField(required=False, help_text="ms an EventSource waits before it reconnects")

    class Meta:
        optional_fields = ('id', 'retry')


class MetricBucketOut(serializers.Serializer):
    step = serializers.IntegerField(help_text="the bucket's first step on the grid")
    first_step = serializers.IntegerField(help_text="the first step reported in the bucket")
    last_step = serializers.IntegerField(help_text="the last step reported in the bucket")
    min = serializers.FloatField()
    max = serializers.FloatField()
    mean = serializers.FloatField()
    count = serializers.IntegerField()


class MetricSummaryOut(serializers.Serializer):
    """One metric over one attempt (streaming.metrics.metric_summary)."""

    last = serializers.FloatField(allow_null=True, help_text="the last value reported")
    last_step = serializers.IntegerField(allow_null=True, help_text="the step of the last value")
    min = serializers.FloatField()
    max = serializers.FloatField()
    mean = serializers.FloatField()
    count = serializers.IntegerField()


class MetricSeriesOut(serializers.Serializer):
    name = serializers.CharField()
    attempt = serializers.IntegerField()
    buckets = MetricBucketOut(many=True)


class JobMetricsOut(serializers.Serializer):
    job = serializers.IntegerField()
    names = serializers.ListField(child=serializers.CharField(), help_text="every metric name the job reported")
    from_step = serializers.IntegerField(allow_null=True)
    to_step = serializers.IntegerField(allow_null=True)
    bucket_steps = serializers.IntegerField(allow_null=True, help_text="steps per bucket; null when nothing is in range")
    series = MetricSeriesOut(many=True)
