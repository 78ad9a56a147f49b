"""Storing a batch of events fast: rows as plain objects, ids in one round trip, one COPY; and
reading them back the same way for a replay.

A Django model instance per event costs more than the whole COPY, so ingest builds StoredEvent rows:
the event's payload is encoded to JSON once, for the table and for the frames the WebSocket clients
get (StoredEvent.text appends the envelope to it), and its time formatted once, for both as well.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any, cast

from django.db import connection
from django.db.models import TextField
from django.db.models.functions import Cast
from torchyard import stream_contract as contract

from . import jsontext
from .models import JobEvent, event_message, seq_of

_encode = jsontext.encode
COPY_COLUMNS = ("id", "job_id", "node_id", "attempt", "node_rank", "rank", "type", "ts", "payload", "dedupe_key")


@dataclass(slots=True)
class StoredEvent:
    job_id: int
    node_id: int | None
    attempt: int
    node_rank: int | None
    rank: int | None
    type: str
    ts: dt.datetime
    payload: dict[str, Any]
    dedupe_key: str
    pk: int = 0
    ts_text: str = field(init=False)
    payload_json: str = field(init=False)

    def __post_init__(self) -> None:
        self.ts_text = self.ts.isoformat()
        self.payload_json = _json_for_postgres(self.payload)

    def message(self) -> contract.JobEvent:
        """JobEvent.as_message."""
        return event_message(pk=self.pk, job_id=self.job_id, node_id=self.node_id, node_rank=self.node_rank,
                             rank=self.rank, attempt=self.attempt, dedupe_key=self.dedupe_key, type=self.type,
                             ts=self.ts, payload=self.payload)

    def event(self) -> contract.JobEvent:
        """The event as its producer wrote it, typed by the stream contract: the payload under the
        envelope of the row's columns (`ts` in epoch seconds). What the appliers read
        (stream_contract.AppliedEvent); ingest took it from a producer the contract types."""
        event = {**self.payload, "type": self.type, "job": self.job_id, "node": self.node_id,
                 "node_rank": self.node_rank, "rank": self.rank, "attempt": self.attempt,
                 "seq": seq_of(self.dedupe_key), "ts": self.ts.timestamp()}
        return cast("contract.JobEvent", event)

    def text(self) -> str:
        """JobEvent.as_message as JSON."""
        if "id" in self.payload:  # the envelope's id must win: encode the message whole
            return _encode(self.message())
        return jsontext.event_text(self.payload_json, pk=self.pk, job_id=self.job_id, node_id=self.node_id,
                                   node_rank=self.node_rank, rank=self.rank, attempt=self.attempt,
                                   seq=seq_of(self.dedupe_key), type=self.type, ts=self.ts_text)


ROW_FIELDS = ("job_id", "node_id", "attempt", "node_rank", "rank", "type", "ts", "payload", "dedupe_key", "pk")


def stored_after(*, job_id: int, after: int, limit: int, types: list[str] | None = None,
                 rank: int | None = None) -> list[StoredEvent]:
    """The job's events after the cursor (of those types, of that rank), oldest first, read back as
    rows: a replay builds its frames from them as ingest builds the live ones, without a model
    instance per event."""
    events = JobEvent.objects.filter(job_id=job_id, id__gt=after)
    if types:
        events = events.filter(type__in=types)
    if rank is not None:
        events = events.filter(rank=rank)
    return stored_rows(events.order_by("id")[:limit])


def stored_rows(events: Any) -> list[StoredEvent]:
    """A queryset of JobEvents read as rows. The payload comes as jsonb's text and is decoded here
    with orjson: JSONField's own decoding (the standard json module) was the largest cost of a
    replay and of the SSE stream (py-spy, backend/README.md "The event path")."""
    at = ROW_FIELDS.index("payload")
    fields = [*ROW_FIELDS[:at], "payload_text", *ROW_FIELDS[at + 1:]]
    rows = events.annotate(payload_text=Cast("payload", TextField())).values_list(*fields)
    return [StoredEvent(*_decoded(row, at)) for row in rows]


def _decoded(row: tuple[Any, ...], at: int) -> list[Any]:
    values = list(row)
    values[at] = jsontext.decode(values[at])
    return values


def count_or_none(value: Any) -> int | None:
    """A rank, node rank or attempt as the table takes it (a non-negative integer), else None."""
    if isinstance(value, bool):
        return None
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if number >= 0 else None


def timestamp(value: Any) -> dt.datetime:
    """An event's `ts` (epoch seconds); now when it is missing or not a time."""
    try:
        return dt.datetime.fromtimestamp(float(value), tz=dt.UTC)
    except (TypeError, ValueError, OverflowError, OSError):
        return dt.datetime.now(tz=dt.UTC)


def _json_for_postgres(payload: dict[str, Any]) -> str:
    """The payload as jsonb takes it: PostgreSQL refuses the NUL character in a string."""
    text = _encode(payload)
    if "\\u0000" in text:
        text = _encode(_without_nul(payload))
    return text


def _without_nul(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {k: _without_nul(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_nul(v) for v in value]
    return value


def insert_events(rows: list[StoredEvent]) -> None:
    """Store rows and set their ids (increasing in row order). PostgreSQL: ids from the sequence in
    one query, then one COPY; elsewhere, a bulk insert that returns them."""
    if not rows:
        return
    if connection.vendor != "postgresql":
        created = JobEvent.objects.bulk_create([
            JobEvent(job_id=r.job_id, node_id=r.node_id, attempt=r.attempt, node_rank=r.node_rank, rank=r.rank,
                     type=r.type, ts=r.ts, payload=r.payload, dedupe_key=r.dedupe_key) for r in rows], batch_size=500)
        for row, event in zip(rows, created, strict=True):
            row.pk = event.pk
        return
    table = JobEvent._meta.db_table
    with connection.cursor() as cursor:
        ids = _take_ids(cursor, table, len(rows))
        # The raw psycopg cursor: its errors are made Django's (IntegrityError) by hand.
        with connection.wrap_database_errors, \
                cursor.cursor.copy(f'COPY "{table}" ({", ".join(COPY_COLUMNS)}) FROM STDIN') as copy:
            for pk, row in zip(ids, rows, strict=True):
                row.pk = pk
                copy.write_row((pk, row.job_id, row.node_id, row.attempt, row.node_rank, row.rank, row.type,
                                row.ts_text, row.payload_json, row.dedupe_key))


def _take_ids(cursor: Any, table: str, count: int) -> list[int]:
    """`count` ids from the table's sequence, increasing: a range when they are consecutive (ingest
    is the only writer, so they are), else every one of them."""
    cursor.execute(
        "SELECT min(id), max(id), CASE WHEN max(id) - min(id) + 1 = count(*) THEN NULL ELSE array_agg(id ORDER BY id) END "
        "FROM (SELECT nextval(pg_get_serial_sequence(%s, 'id')) AS id FROM generate_series(1, %s)) AS taken",
        [table, count])
    low, high, every = cursor.fetchone()
    return list(range(low, high + 1)) if every is None else list(every)
