"""Hooks through which apps above jobs take part in what the controller does, without jobs
importing them (jobs sits below checkpoints: pyproject.toml's import contracts). An app registers
its hook in its AppConfig.ready()."""

from __future__ import annotations

from collections.abc import Callable

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
