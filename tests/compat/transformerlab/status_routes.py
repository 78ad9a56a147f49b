"""TransformerLab's status routes, as its document spells them: every test reads a job's status on each
spelling and checks they answer the same."""

from __future__ import annotations

STATUS_FIELDS = {"job_id", "seed_job_id", "status", "status_reason", "world_size", "attempt", "master_addr",
                 "master_port", "nodes", "waiting_for_ranks"}


def status_urls(job_id) -> list[str]:
    """Every spelling of the status route TransformerLab's document uses."""
    return [f"/api/network/distributed/status/{job_id}", f"/api/network/distributed_jobs/{job_id}/status"]


def statuses(api, job_id) -> dict:
    """The status by `job_id` on every spelling, checked to be one and the same answer, with every field."""
    answers = [api.get(url) for url in status_urls(job_id)]
    for url, answer in zip(status_urls(job_id), answers, strict=True):
        assert answer.status_code == 200, (url, answer.content)
        assert set(answer.json()) == STATUS_FIELDS
    assert answers[0].json() == answers[1].json()
    return answers[0].json()
