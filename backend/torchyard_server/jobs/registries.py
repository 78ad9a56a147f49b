"""Hook points through which apps above jobs take part in what the controller does, without jobs
importing them (jobs sits below checkpoints: pyproject.toml's import contracts). Each is a named
registry (core/registry.py); an app registers its instance in its AppConfig.ready()."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypedDict

from torchyard.stream_contract import AppliedEvent

from ..core.registry import Instance, Registry


class ResumeLookup(Instance):
    def manifest_uri(self, job_id: int) -> str:
        """The URI of the manifest the job's next attempt resumes from, "" for none."""
        raise NotImplementedError

    def memory_resume(self, job_id: int, uri: str) -> tuple[dict[str, Any], list[str]] | None:
        """For a memory checkpoint's URI: its manifest and the names of the living machines holding it."""
        raise NotImplementedError


# Required: failing loudly beats relaunching a recovered job from scratch without a word.
resume_lookups: Registry[ResumeLookup] = Registry("resume lookup", single=True)


def resume_manifest_uri(*, job_id: int) -> str:
    return resume_lookups.one().manifest_uri(job_id)


def memory_resume(*, job_id: int, uri: str) -> tuple[dict[str, Any], list[str]] | None:
    return resume_lookups.one().memory_resume(job_id, uri)


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


class QueuedJob(TypedDict):
    """A job in the queue as the API and the cluster stream show it (QueueEntryOut's shape):
    placement/queue.py queue_entries."""

    id: int
    name: str
    project: str
    owner: str
    status: str
    priority: int
    position: int  # from 1, in queue order
    reason: str
    blocked_by: str | None  # what the job waits behind
    head: bool
    borrowing: bool
    backfill: bool
    expected_start: str | None  # ISO 8601, to the minute
    submitted_at: str
    waiting_since: str
    gpus: int
    processes: int


class JobEndListener(Instance):
    def job_ended(self, job_id: int, status: str) -> None:
        """The job reached `status` (completed, failed or stopped), inside the transaction that moved
        it there: work of its own waits for the commit (transaction.on_commit)."""
        raise NotImplementedError


# Apps that follow jobs to their end (sweeps: a trial's job ending moves its sweep on).
job_end_listeners: Registry[JobEndListener] = Registry("job end listeners")


class QueueListener(Instance):
    def queue_changed(self, entries: list[QueuedJob]) -> None:
        """The queue as it now stands (jobs/placement/queue.py queue_entries), after a pass, on commit."""
        raise NotImplementedError


queue_listeners: Registry[QueueListener] = Registry("queue listeners")


def queue_changed(entries: list[QueuedJob]) -> None:
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


class EventApplier(Instance):
    """Applies what events of one type (`type`: torchyard.protocol's STATE, METRIC...) mean, inside
    the transaction that stores their batch (streaming/ingest.py): a batch that fails is neither
    stored nor applied, and read again. Each event comes as the stream contract's AppliedEvent: its
    row's columns, and the event itself, typed (`event()`: an applier narrows it by its `type`)."""

    # A fold of the batch (metric: the latest step wins) gets all of the batch's events of its type
    # at once, after the others; the others get each event alone, in the order stored.
    folds = False

    def apply(self, events: Sequence[AppliedEvent]) -> None:
        raise NotImplementedError


# Declared here, the lowest app that applies events: checkpoints and artifacts, above it, register
# theirs; an event type nobody registered (log, resource) is only stored and sent.
event_appliers: Registry[EventApplier] = Registry("event appliers")
