"""Asking for a queue pass (jobs/placement/queue.py) when something may let a queued job start: a submission,
a job's end, a recovery sent back to the queue. Many asks before a pass starts make one pass: the
first sets a Redis key and sends the task, the pass deletes the key as it starts, so an ask that
comes while a pass runs sends the next one (it may not have seen what that ask was about). The
beat's pass every few seconds covers a lost task or an unreachable Redis."""

from __future__ import annotations

import logging

import redis
from django.db import transaction
from torchyard import protocol

from ..celery import app as celery_app
from .events import redis_client
from .models import Job

log = logging.getLogger(__name__)
POKE_KEY = "torchyard:queue:poke"
# A pass that never came (its task lost) stops holding the next asks back after this long.
POKE_TTL_MS = 10_000
SCHEDULE_TASK = "torchyard_server.jobs.tasks.schedule_queued"


def queue_poke() -> None:
    if not Job.objects.filter(status__in=[Job.Status.QUEUED, Job.Status.PREEMPTED]).exists():
        return  # nothing waits: nothing a pass could start
    try:
        if not redis_client().set(POKE_KEY, "1", nx=True, px=POKE_TTL_MS):
            return  # a pass is already asked for and has not started
    except redis.RedisError as exc:
        log.warning("queue: cannot coalesce a pass request (%s); sending it anyway", exc)
    celery_app.send_task(SCHEDULE_TASK, queue=protocol.CONTROL_QUEUE)


def queue_poke_on_commit() -> None:
    transaction.on_commit(queue_poke)


def queue_pass_started() -> None:
    """The pass about to read the queue: later asks need a pass of their own."""
    try:
        redis_client().delete(POKE_KEY)
    except redis.RedisError as exc:
        log.warning("queue: %s", exc)
