"""The controller's ingest loop: Redis event stream -> database -> the live fan-out.

It is the only writer of JobEvent rows (so ids are a gap-free resume cursor), applies what the
events mean (node reports, progress, checkpoint commits: through the appliers the apps register in
jobs.registries.event_appliers; heartbeats through the services), and hands each committed batch
to the live fan-out (registries.batch_listeners). A batch is stored and applied in one transaction
and acknowledged only after it commits, so every stored event is applied exactly once: a restart,
or a batch that failed, re-reads the unacknowledged entries, and dedupe keys make that safe.

Fast path (backend/README.md, "The event path"): supervisors pack many events per stream entry; a
batch is stored with one COPY under ids taken from the table's sequence in one round trip (bulk
insert elsewhere than PostgreSQL), without first looking its dedupe keys up: a key stored before
makes the COPY fail and the batch is stored again the careful way, as it always is when re-reading
after a restart. Only the events that change something (states, metrics, checkpoints, stalls,
artifacts) are applied; the fan-out (live/broadcast.py) sends the batch to each job's group as
one message of frames written once, which the WebSocket consumers forward as they are.

A machine acts only as itself: its agent and supervisors write only to its own streams
(protocol.machine_event_stream / machine_liveness_stream), and from those this loop accepts a node's
events only while the node is placed on that machine, and agent heartbeats only for that machine;
anything else is dropped with a warning. The controller's own events come on the shared stream. The
machines' streams are found from the machine table (every DISCOVER_EVERY), so a new machine needs
no restart; a removed machine's streams are no longer read, and deleted.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from typing import Any, cast

import redis
from django.db import IntegrityError, close_old_connections, transaction
from torchyard import protocol
from torchyard import stream_contract as contract

from ..jobs.control.reports import node_record_heartbeats
from ..jobs.models import Job, JobNode
from ..jobs.registries import event_appliers
from ..machines.models import Machine
from ..machines.services import machine_record_heartbeats
from .bulk import StoredEvent, count_or_none, insert_events, timestamp
from .models import JobEvent
from .registries import batch_committed
from .telemetry import IngestStats

log = logging.getLogger(__name__)
PERSISTED = {protocol.STATE, protocol.LOG, protocol.METRIC, protocol.RESOURCE, protocol.CHECKPOINT, protocol.ARTIFACT,
             protocol.RESULT, protocol.PREFLIGHT, protocol.STALLED, protocol.STACKS, protocol.PACE, protocol.STRAGGLER}
# What ingest keeps in an event's columns (and its dedupe key): the rest is its payload.
ENVELOPE = contract.STORED_APART
CONSUMER = "controller"
# Entries read per stream in one batch: a supervisor packs up to protocol.PACKED_MAX_EVENTS events
# in one, so a batch holds up to ~10,000 events per stream under a flood, one entry per event for the
# controller's own.
READ_ENTRIES = 20
# How often the machine table is read for machines whose streams are not read yet.
DISCOVER_EVERY = 1.0
# While heartbeats flow, how long a step waits for events before it reads the liveness streams again.
BEATS_WAIT_MS = 100


def _entry_order(entry_id: Any) -> tuple[int, int]:
    """Redis entry ids are `<ms>-<seq>` from one server clock: merging streams by them keeps the
    order in which the events were added."""
    ms, _, seq = (entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)).partition("-")
    return int(ms), int(seq or 0)


def _dedupe_key(event: dict[str, Any]) -> str | None:
    if event.get("node") is not None and event.get("seq") is not None:
        return f"n{event['node']}:{event['seq']}"
    if event.get("key"):
        return f"c{event['key']}"
    return None


class Ingest:
    def __init__(self, redis_url: str, *, batch: int = READ_ENTRIES, block_ms: int = 200):
        self.redis = redis.Redis.from_url(redis_url, socket_timeout=30, socket_connect_timeout=5)
        self.batch = batch
        self.block_ms = block_ms
        self._backlog = True  # re-read our own unacknowledged entries first
        # Streams read, each with the machine it belongs to (None: the controller's shared streams).
        self.event_streams: dict[str, int | None] = {}
        self.liveness_streams: dict[str, int | None] = {}
        self._last_discover = 0.0
        self.telemetry = IngestStats()  # entries applied and their wait, for /metrics
        self._placed: dict[int, tuple[int | None, int, int]] = {}  # the nodes of the batch, from authorize()

    def ensure_group(self) -> None:
        """Create our consumer group on the shared streams and on every machine's."""
        self.event_streams = {protocol.EVENT_STREAM: None}
        self.liveness_streams = {protocol.LIVENESS_STREAM: None}
        self._create_groups([protocol.EVENT_STREAM, protocol.LIVENESS_STREAM])
        self.discover_machines()

    def _create_groups(self, streams: list[str]) -> None:
        for stream in streams:
            try:
                # From id 0: what an agent added before its machine was discovered is read too.
                self.redis.xgroup_create(stream, protocol.EVENT_GROUP, id="0", mkstream=True)
            except redis.ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise

    def discover_machines(self) -> None:
        """Start reading the streams of machines added since, stop reading (and delete) those of
        machines removed."""
        self._last_discover = time.monotonic()
        close_old_connections()
        machines = set(Machine.objects.values_list("pk", flat=True))
        known = {m for m in self.event_streams.values() if m is not None}
        for machine_id in machines - known:
            events, beats = protocol.machine_event_stream(machine_id), protocol.machine_liveness_stream(machine_id)
            self._create_groups([events, beats])
            self.event_streams[events] = machine_id
            self.liveness_streams[beats] = machine_id
        for machine_id in known - machines:
            events, beats = protocol.machine_event_stream(machine_id), protocol.machine_liveness_stream(machine_id)
            self.event_streams.pop(events, None)
            self.liveness_streams.pop(beats, None)
            # What a removed machine's streams still hold is dropped with them.
            self.redis.delete(events, beats)
            log.info("ingest: machine %s removed; its streams are no longer read", machine_id)

    def run(self, stop: threading.Event) -> None:
        self.ensure_group()
        log.info("ingest: reading %s and %d machines' streams", protocol.EVENT_STREAM, len(self.event_streams) - 1)
        while not stop.is_set():
            self.step_or_retry()

    def step_or_retry(self) -> int:
        """One step; a batch that fails is neither stored (one transaction) nor acknowledged, so
        the next step re-reads it first. Returns how many entries were handled."""
        try:
            return self.step()
        except redis.ConnectionError as exc:
            log.warning("ingest: redis unavailable (%s); retrying", exc)
            time.sleep(1.0)
        except Exception:  # keep ingesting: one bad batch must not stop the stream
            log.exception("ingest: batch failed; it stays pending and is read again")
            self._backlog = True
            close_old_connections()
            time.sleep(0.5)
        return 0

    def read_liveness(self) -> int:
        """Apply every heartbeat waiting on the liveness stream: before any event, every step, so a
        backlog of log lines never makes a healthy node look dead."""
        return self._consume(self.liveness_streams, ">", count=10_000, block=None)

    def step(self) -> int:
        if not self.event_streams:
            self.ensure_group()
        elif time.monotonic() - self._last_discover > DISCOVER_EVERY:
            self.discover_machines()
        beats = self.read_liveness()
        backlog = self._backlog
        # While heartbeats flow (a thousand agents: 500 a second), wait for events BEATS_WAIT_MS rather
        # than block_ms, so the next beats wait that long at most; but not go round at once: every
        # round reads every machine's two streams (two commands of a thousand keys), and going round
        # at once did that as often as the CPU allowed, for a few beats a time. An event that comes
        # ends the wait at once either way.
        handled = self._consume(self.event_streams, "0" if backlog else ">", count=self.batch,
                                block=None if backlog else min(BEATS_WAIT_MS, self.block_ms) if beats else self.block_ms)
        if backlog and not handled:
            self._backlog = False
        self.telemetry.report(self.redis)
        return handled

    def _consume(self, streams: dict[str, int | None], start_id: str, *, count: int, block: int | None) -> int:
        """Read a batch of our group's entries from every stream, process them (merged in the order
        they were added), then acknowledge and delete them: an entry is acknowledged only once what
        it means is committed."""
        try:
            response: Any = self.redis.xreadgroup(protocol.EVENT_GROUP, CONSUMER,
                                                  dict.fromkeys(streams, start_id), count=count, block=block)
        except redis.ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            # A stream (and its group) vanished: a Redis that lost its data, a stream deleted.
            log.warning("ingest: %s; creating the consumer groups again", exc)
            self._create_groups(list(streams))
            return 0
        entries: list[tuple[str, Any, Any]] = []
        for raw_stream, items in response or []:
            stream = raw_stream.decode() if isinstance(raw_stream, bytes) else raw_stream
            entries.extend((stream, entry_id, fields) for entry_id, fields in items)
        if not entries:
            return 0
        entries.sort(key=lambda entry: _entry_order(entry[1]))
        close_old_connections()
        decoded: list[tuple[int | None, dict[str, Any]]] = []
        for stream, entry_id, fields in entries:
            try:
                machine = streams.get(stream)
                decoded.extend((machine, event) for event in protocol.decode_entry(fields))
            except (ValueError, TypeError):
                log.warning("ingest: dropping undecodable entry %s of %s", entry_id, stream)
        self.process(self.authorize(decoded))
        by_stream: dict[str, list[Any]] = defaultdict(list)
        for stream, entry_id, _ in entries:
            by_stream[stream].append(entry_id)
        pipe = self.redis.pipeline(transaction=False)
        for stream, ids in by_stream.items():
            pipe.xack(stream, protocol.EVENT_GROUP, *ids)
            pipe.xdel(stream, *ids)
        pipe.execute()
        self.telemetry.record("liveness" if streams is self.liveness_streams else "events",
                              [entry_id for _, entry_id, _ in entries])
        return len(entries)

    def authorize(self, decoded: list[tuple[int | None, dict[str, Any]]]) -> list[dict[str, Any]]:
        """Keep the controller's events (shared stream) and, from a machine's stream, only its own
        heartbeats and events of nodes placed on it (of the job and attempt they claim)."""
        node_ids = {e.get("node") for m, e in decoded if m is not None and e.get("type") != protocol.MACHINE_HEARTBEAT}
        placed = {pk: (machine_id, job_id, attempt) for pk, machine_id, job_id, attempt in
                  JobNode.objects.filter(pk__in={n for n in node_ids if isinstance(n, int)})
                  .values_list("pk", "machine_id", "job_id", "attempt")}
        self._placed = placed  # store() needs to know these nodes and their jobs exist: no second query
        kept: list[dict[str, Any]] = []
        dropped: dict[tuple[Any, ...], int] = defaultdict(int)
        for machine_id, event in decoded:
            if machine_id is None or self._own(machine_id, event, placed):
                kept.append(event)
            else:
                dropped[(machine_id, event.get("type"), event.get("machine"), event.get("node"), event.get("job"))] += 1
        for (machine_id, kind, machine, node, job), n in dropped.items():
            claim = f"machine {machine}" if kind == protocol.MACHINE_HEARTBEAT else f"node {node} of job {job}"
            log.warning("ingest: dropped %d %s event(s) from machine %s's stream claiming %s, which is not "
                        "on that machine", n, kind, machine_id, claim)
        return kept

    @staticmethod
    def _own(machine_id: int, event: dict[str, Any], placed: dict[int, tuple[int | None, int, int]]) -> bool:
        if event.get("type") == protocol.MACHINE_HEARTBEAT:
            return str(event.get("machine")) == str(machine_id)
        node = placed.get(event.get("node"))  # type: ignore[arg-type]
        if node is None or node[0] != machine_id:
            return False
        if event.get("job") is not None and event["job"] != node[1]:
            return False
        return event.get("attempt") is None or event["attempt"] == node[2]

    # --- one batch ------------------------------------------------------------------------------
    def process(self, events: list[dict[str, Any]]) -> None:
        machine_beats: dict[object, protocol.MachineHeartbeat] = {}
        node_beats: dict[int, float] = {}
        persisted = []
        for event in events:
            kind = event.get("type")
            if kind == protocol.MACHINE_HEARTBEAT:
                # Its agent's (authorize() kept only a machine's own): machine_record_heartbeats reads
                # each field defensively.
                machine_beats[event.get("machine")] = cast("protocol.MachineHeartbeat", event)
            elif kind == protocol.HEARTBEAT and event.get("node") is not None:
                node_beats[int(event["node"])] = float(event.get("ts") or time.time())
            elif kind in PERSISTED and event.get("job") is not None:
                persisted.append(event)
        if machine_beats:
            machine_record_heartbeats(events=list(machine_beats.values()))
        if node_beats:
            node_record_heartbeats(beats=node_beats)
        if persisted:
            batch_committed(self.store_and_apply(persisted))

    def store_and_apply(self, events: list[dict[str, Any]]) -> list[StoredEvent]:
        """Stored and applied in one transaction: a crash or an error between the two must not leave
        an event stored (so skipped as a duplicate when re-read) but never applied, a lost
        `completed` or `checkpoint`. Side effects wait for the commit (on_commit). The dedupe keys
        are looked up first only when the batch may hold stored events: re-read after a restart or
        a failure, or refused by the unique key (the whole transaction is then rolled back)."""
        careful = self._backlog
        while True:
            try:
                with transaction.atomic():
                    rows = self.store(events, careful=careful)
                    self.apply(rows)
                return rows
            except IntegrityError:
                if careful:
                    raise
                careful = True

    def store(self, events: list[dict[str, Any]], *, careful: bool = True) -> list[StoredEvent]:
        keyed = [(key, e) for e in events if (key := _dedupe_key(e))]
        # Nodes and jobs that exist: those authorize() just read, the others looked up (all of them
        # when careful: a batch refused by a foreign key finds out what went away since).
        known = {} if careful else {pk: job for pk, (_, job, _) in self._placed.items()}
        node_ids = {e["node"] for _, e in keyed if isinstance(e.get("node"), int)}
        if missing_nodes := node_ids - known.keys():
            known.update(JobNode.objects.filter(pk__in=missing_nodes).values_list("pk", "job_id"))
        nodes, jobs = set(known), set(known.values())
        if missing_jobs := {e["job"] for _, e in keyed} - jobs:
            jobs.update(Job.objects.filter(pk__in=missing_jobs).values_list("pk", flat=True))
        seen: set[str] = set()
        if careful:
            seen = set(JobEvent.objects.filter(dedupe_key__in=[k for k, _ in keyed]).values_list("dedupe_key", flat=True))
        rows, batch_keys = [], set()
        for key, e in keyed:
            if e["job"] not in jobs or key in seen or key in batch_keys:
                continue
            batch_keys.add(key)
            # What is left once the envelope is taken out is the payload (the event itself stays
            # whole: a batch refused by the unique key is stored again from the same events).
            payload = dict(e)
            envelope = {k: payload.pop(k) for k in ENVELOPE if k in payload}
            if envelope["type"] == protocol.STATE and "scope" not in payload:
                payload["scope"] = "node"
            node = envelope.get("node")
            rows.append(StoredEvent(
                job_id=envelope["job"],
                node_id=node if node in nodes else None,
                attempt=count_or_none(envelope.get("attempt")) or 0,
                node_rank=count_or_none(envelope.get("node_rank")),
                rank=count_or_none(envelope.get("rank")),
                type=envelope["type"],
                ts=timestamp(envelope.get("ts") or time.time()),
                payload=payload,
                dedupe_key=key,
            ))
        insert_events(rows)
        return rows

    def apply(self, rows: list[StoredEvent]) -> None:
        """Hand each event to the applier its app registered for its type (jobs.registries
        .event_appliers: jobs, checkpoints, artifacts); log lines, resource samples and preflights
        have none: they are only stored and sent."""
        folded: dict[str, list[StoredEvent]] = defaultdict(list)
        for row in rows:
            applier = event_appliers.get_or_none(row.type)
            if applier is None:
                continue
            if applier.folds:
                folded[row.type].append(row)
            else:
                applier.apply([row])
        for kind, items in folded.items():
            event_appliers.get(kind).apply(items)
