"""A job stream's first replay when the page asks for the tail (`?history=tail`): what a job page
needs to open, not the job's whole history (a 200,000-line job took 41 s to replay whole).

It holds the last `lines_per_rank` log lines of every rank, each rank's last METRIC_POINTS_PER_RANK
metrics (the charts draw everything before them from /api/jobs/{id}/metrics, downsampled in the
database, and the node cards show each rank's latest), and every event that is neither a log line,
a metric nor a resource sample (states, checkpoints, preflights, stalls, results, artifacts: a few
per node and attempt). It is read at or below one id, the job's last event when the replay starts
(ingest commits ids in order, so nothing below it comes later), and the cursor after it is the id
of the last event it holds: the consumer's usual replay after that cursor sends the rest, once.

`logs_before` says where older lines begin: every log line with an id at or above it was sent (each
cut rank's tail reaches back at least that far), and GET /api/jobs/{id}/logs?tail=&before= pages
the lines below it. None when every rank's lines were all sent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from django.db.models import TextField
from django.db.models.functions import Cast
from torchyard import stream_contract as wire

from ..jobs.models import Job, JobNode
from ..streaming.bulk import StoredEvent
from ..streaming.jsontext import event_text
from ..streaming.models import JobEvent, seq_of
from .backpressure import drained, send_backlog
from .frames import frame_text

# The first replay's log lines, all ranks together (a screen shows ~25): a rank's share, within
# these bounds.
TAIL_LINES = 3_000
MIN_LINES_PER_RANK, MAX_LINES_PER_RANK = 50, 1_000
METRIC_POINTS_PER_RANK = 10
# Events per frame: a few large frames, which the page applies in one go (it applies what arrived
# every 100 ms, and each application redraws the log and the charts).
TAIL_FRAME_EVENTS = 5_000
# Sampled over time, read by nothing on a job page: left to /events?type=resource.
NOT_REPLAYED = ("log", "metric", "resource")


@dataclass(frozen=True, slots=True)
class TailReplay:
    frames: list[str]
    last_id: int  # the cursor after it: the id of its last event (0 when there is none)
    logs_before: int | None
    lines_per_rank: int


def lines_per_rank(world_size: int | None) -> int:
    share = TAIL_LINES // max(1, world_size or 1)
    return max(MIN_LINES_PER_RANK, min(MAX_LINES_PER_RANK, share))


# Rows read per step of a rank tail's backward scan.
SCAN_ROWS = 20_000


def rank_tails(job_id: int, type: str, upper: int, per_rank: int, ranks: set[int]) -> tuple[list[int], int | None]:
    """The ids of each rank's last `per_rank` events of `type` up to `upper`, and where older ones
    begin: the latest first id among the ranks that had more (below it some were left out).

    Read newest first through the (job, type, id) index, SCAN_ROWS at a time, until every rank seen
    has more than its tail and each of `ranks` (the job's nodes') has been seen, or the job's first
    event: a busy job's tail is one step, not a sort of its whole log (no index holds the rank; one
    would slow every insert of ingest for the sake of opening a page). A rank silent since before
    where the scan stopped (only a rank no node holds, say the controller's lines) has its lines
    below `logs_before`, paged like the rest."""
    counts: dict[int | None, int] = {}
    ids: list[int] = []
    firsts: dict[int | None, int] = {}
    below = upper + 1
    while True:
        rows = list(JobEvent.objects.filter(job_id=job_id, type=type, id__lt=below).order_by("-id")
                    .values_list("id", "rank")[:SCAN_ROWS])
        for pk, rank in rows:
            n = counts[rank] = counts.get(rank, 0) + 1
            if n <= per_rank:
                ids.append(pk)
                if n == per_rank:
                    firsts[rank] = pk
        if len(rows) < SCAN_ROWS:
            break
        below = rows[-1][0]
        if ranks <= counts.keys() and all(n > per_rank for n in counts.values()):
            break
    cut = [firsts[rank] for rank, n in counts.items() if n > per_rank]
    return ids, max(cut, default=None)


def event_texts(job_id: int, ids: list[int]) -> list[str]:
    """The events' JSON (JobEvent.as_message), in id order, from their payloads' stored JSON text
    with the envelope appended (jsontext.event_text): decoding every payload only to encode it again
    was most of a replay's time."""
    rows = (JobEvent.objects.filter(job_id=job_id, id__in=ids).order_by("id")
            .annotate(payload_text=Cast("payload", TextField()))
            .values_list("pk", "node_id", "attempt", "node_rank", "rank", "type", "ts", "dedupe_key", "payload_text"))
    texts = []
    for pk, node_id, attempt, node_rank, rank, type, ts, key, payload in rows:
        if '"id"' in payload:  # may be a payload key: the envelope's id must win (StoredEvent.text)
            event = StoredEvent(job_id, node_id, attempt, node_rank, rank, type, ts, json.loads(payload), key, pk)
            texts.append(event.text())
        else:
            texts.append(event_text(payload, pk=pk, job_id=job_id, node_id=node_id, node_rank=node_rank, rank=rank,
                                    attempt=attempt, seq=seq_of(key), type=type, ts=ts.isoformat()))
    return texts


def tail_replay(*, job_id: int, batch: int = TAIL_FRAME_EVENTS) -> TailReplay:
    """The first replay of a job page (module docstring), in frames of `batch` events."""
    per_rank = lines_per_rank(Job.objects.filter(pk=job_id).values_list("world_size", flat=True).first())
    upper = JobEvent.objects.filter(job_id=job_id).order_by("-id").values_list("id", flat=True).first()
    if upper is None:
        return TailReplay(frames=[], last_id=0, logs_before=None, lines_per_rank=per_rank)
    ranks = {rank for start, end in JobNode.objects.filter(job_id=job_id).values_list("rank_start", "rank_end")
             for rank in range(start, end + 1)}
    logs, logs_before = rank_tails(job_id, "log", upper, per_rank, ranks)
    metrics, _ = rank_tails(job_id, "metric", upper, METRIC_POINTS_PER_RANK, ranks)
    others = JobEvent.objects.filter(job_id=job_id, id__lte=upper).exclude(type__in=NOT_REPLAYED)
    wanted = sorted([*logs, *metrics, *others.values_list("id", flat=True)])
    frames = []
    for at in range(0, len(wanted), batch):
        chunk = wanted[at:at + batch]
        # `prev` unknown: what lies between the events it holds was left out on purpose.
        frames.append(frame_text(event_texts(job_id, chunk), prev=None, last=chunk[-1], replay=True))
    return TailReplay(frames=frames, last_id=wanted[-1] if wanted else 0, logs_before=logs_before,
                      lines_per_rank=per_rank)


def wants_tail(scope) -> bool:
    """`?history=tail`: the page opens on the tail; without it a stream replays everything after
    its cursor (the CLI's `logs --follow`, a resuming client)."""
    return (parse_qs(scope.get("query_string", b"").decode()).get("history") or [""])[0] == "tail"


async def send_tail_replay(consumer, *, job_id: int, backlog_limit: int) -> int:
    """Sends the tail replay: a `history` message (where older lines begin), then its frames, each
    once the client has read what it was sent down to `backlog_limit` bytes. The cursor after it."""
    tail = await database_sync_to_async(tail_replay)(job_id=job_id)
    await consumer.send_json({"type": wire.HISTORY, "logs_before": tail.logs_before,
                              "lines_per_rank": tail.lines_per_rank, "last_id": tail.last_id})
    for frame in tail.frames:
        await drained(lambda: send_backlog(consumer.scope), below=backlog_limit)
        await consumer.send(text_data=frame)
    return tail.last_id
