"""Hook points through which apps above jobs take part in what the controller does, without jobs
importing them (jobs sits below checkpoints: pyproject.toml's import contracts). Each is a named
registry (core/registry.py); an app registers its instance in its AppConfig.ready()."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any, Protocol

from ..core.registry import Instance, Registry


class ResumeLookup(Instance):
    def manifest_uri(self, job_id: int) -> str:
        """The URI of the manifest the job's next attempt resumes from, "" for none."""
        raise NotImplementedError


# Required: failing loudly beats relaunching a recovered job from scratch without a word.
resume_lookups: Registry[ResumeLookup] = Registry("resume lookup", single=True)


def resume_manifest_uri(*, job_id: int) -> str:
    return resume_lookups.one().manifest_uri(job_id)


class CheckpointTimes(Instance):
    def last_committed(self, job_ids: list[int]) -> dict[int, float]:
        """When each job last committed a checkpoint (epoch seconds; jobs without one left out)."""
        raise NotImplementedError


# How much work a preemption would lose (jobs/placement/queue.py). Without an answer every job counts as never
# having checkpointed.
checkpoint_times: Registry[CheckpointTimes] = Registry("checkpoint times", single=True)


def last_checkpoint_times(job_ids: list[int]) -> dict[int, float]:
    lookup = checkpoint_times.one_or_none()
    return lookup.last_committed(job_ids) if lookup is not None else {}


class QueueListener(Instance):
    def queue_changed(self, entries: list[dict[str, Any]]) -> None:
        """The queue as it now stands (jobs/placement/queue.py queue_entries), after a pass, on commit."""
        raise NotImplementedError


queue_listeners: Registry[QueueListener] = Registry("queue listeners")


def queue_changed(entries: list[dict[str, Any]]) -> None:
    # A listener that fails is logged, never raised into the pass.
    queue_listeners.notify(lambda listener: listener.queue_changed(entries))


class SharedBundleLookup(Instance):
    def bundle_for(self, sha256: str, user: Any) -> Any:
        """A bundle the user did not upload but may run (the code of a plugin registered in one of
        their projects), or None."""
        raise NotImplementedError


shared_bundle_lookups: Registry[SharedBundleLookup] = Registry("shared bundle lookups")


def shared_bundle_for(*, sha256: str, user: Any) -> Any:
    for lookup in shared_bundle_lookups.all():
        bundle = lookup.bundle_for(sha256, user)
        if bundle is not None:
            return bundle
    return None


class AppliedEvent(Protocol):
    """A stored event as ingest hands it over (streaming.bulk.StoredEvent)."""

    pk: int
    job_id: int
    node_id: int | None
    attempt: int
    node_rank: int | None
    rank: int | None
    type: str
    ts: dt.datetime
    payload: dict[str, Any]


class EventApplier(Instance):
    """Applies what events of one type (`type`: torchyard.protocol's STATE, METRIC...) mean, inside
    the transaction that stores their batch (streaming/ingest.py): a batch that fails is neither
    stored nor applied, and read again."""

    # A fold of the batch (metric: the latest step wins) gets all of the batch's events of its type
    # at once, after the others; the others get each event alone, in the order stored.
    folds = False

    def apply(self, events: Sequence[AppliedEvent]) -> None:
        raise NotImplementedError


# Declared here, the lowest app that applies events: checkpoints and artifacts, above it, register
# theirs; an event type nobody registered (log, resource) is only stored and sent.
event_appliers: Registry[EventApplier] = Registry("event appliers")
