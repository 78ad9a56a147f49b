"""Hooks through which apps above jobs take part in what the controller does, without jobs
importing them (jobs sits below checkpoints: pyproject.toml's import contracts). An app registers
its hook in its AppConfig.ready()."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

# job id -> URI of the manifest the job's next attempt resumes from, "" for none.
ResumeLookup = Callable[[int], str]

_resume_lookup: ResumeLookup | None = None


def register_resume_lookup(lookup: ResumeLookup) -> None:
    global _resume_lookup
    _resume_lookup = lookup


def resume_manifest_uri(*, job_id: int) -> str:
    # Failing loudly beats relaunching a recovered job from scratch without a word.
    if _resume_lookup is None:
        raise RuntimeError("no resume lookup registered: is torchyard_server.checkpoints installed?")
    return _resume_lookup(job_id)


# job ids -> when each last committed a checkpoint (epoch seconds; jobs without one left out): how
# much work a preemption would lose (jobs/queue.py). Without a lookup every job counts as never
# having checkpointed.
CheckpointTimes = Callable[[list[int]], dict[int, float]]

_checkpoint_times: CheckpointTimes | None = None


def register_checkpoint_times(lookup: CheckpointTimes) -> None:
    global _checkpoint_times
    _checkpoint_times = lookup


def last_checkpoint_times(job_ids: list[int]) -> dict[int, float]:
    return _checkpoint_times(job_ids) if _checkpoint_times is not None else {}


# The queue as it now stands (jobs/queue.py queue_entries), after a pass: the streaming app sends it
# to the dashboards. Called on commit; a listener that fails is logged, never raised into the pass.
QueueListener = Callable[[list[dict[str, Any]]], None]

_queue_listeners: list[QueueListener] = []


def register_queue_listener(listener: QueueListener) -> None:
    if listener not in _queue_listeners:
        _queue_listeners.append(listener)


def queue_changed(entries: list[dict[str, Any]]) -> None:
    for listener in _queue_listeners:
        try:
            listener(entries)
        except Exception:
            log.exception("queue listener %r failed", listener)


# A bundle a user did not upload but may run: the code of a plugin registered in one of their
# projects (the plugins app). (sha256, user) -> the Bundle, or None.
SharedBundleLookup = Callable[[str, Any], Any]

_shared_bundle_lookups: list[SharedBundleLookup] = []


def register_shared_bundle_lookup(lookup: SharedBundleLookup) -> None:
    if lookup not in _shared_bundle_lookups:
        _shared_bundle_lookups.append(lookup)


def shared_bundle_for(*, sha256: str, user: Any) -> Any:
    for lookup in _shared_bundle_lookups:
        bundle = lookup(sha256, user)
        if bundle is not None:
            return bundle
    return None
