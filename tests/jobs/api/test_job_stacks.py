"""POST /api/jobs/{id}/stacks: each running node's agent is asked for its ranks' stacks."""

from __future__ import annotations

import pytest
import redis
from clients import signed_in
from django.conf import settings
from django.utils import timezone
from factories import bring_online, make_job, make_node
from torchyard import protocol
from torchyard_server.jobs.models import Job, JobNode


@pytest.mark.django_db(transaction=True)
def test_every_running_node_of_the_current_attempt_is_asked_and_a_job_with_none_gets_a_409(api, owner,
                                                                                             django_capture_on_commit_callbacks):
    (m1, _), (m2, _) = bring_online("s1"), bring_online("s2")
    queue = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    queue.delete(protocol.machine_queue(m1.pk), protocol.machine_queue(m2.pk))
    job = make_job(owner=owner, status=Job.Status.RUNNING, attempt=1)
    make_node(job, node_rank=0, machine=m1, attempt=0, status=JobNode.Status.FAILED)  # an earlier attempt's
    for rank, machine in enumerate((m1, m2)):
        make_node(job, node_rank=rank, machine=machine, attempt=1, status=JobNode.Status.RUNNING,
                  last_heartbeat=timezone.now())
    with django_capture_on_commit_callbacks(execute=True):
        answer = api.post(f"/api/jobs/{job.pk}/stacks")
    assert answer.status_code == 202, answer.content
    body = answer.json()
    assert body["nodes"] == [{"node_rank": 0, "machine": "s1"}, {"node_rank": 1, "machine": "s2"}]
    assert len(body["request"]) == 32
    for machine in (m1, m2):
        [sent] = queue.lrange(protocol.machine_queue(machine.pk), 0, -1)
        assert protocol.TASK_DUMP_STACKS.encode() in sent and body["request"].encode() in sent

    Job.objects.filter(pk=job.pk).update(status=Job.Status.COMPLETED)
    JobNode.objects.filter(job=job).update(status=JobNode.Status.COMPLETED)
    refused = api.post(f"/api/jobs/{job.pk}/stacks")
    assert refused.status_code == 409
    assert refused.json()["detail"] == f"job {job.pk} is completed: no node of attempt 1 is running"


@pytest.mark.django_db
def test_someone_who_cannot_see_the_job_gets_a_404(outsider, owner):
    job = make_job(owner=owner, status=Job.Status.RUNNING)
    assert signed_in(outsider).post(f"/api/jobs/{job.pk}/stacks").status_code == 404
