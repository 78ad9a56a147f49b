"""What a node's final report does to its job, applied as the ingest loop applies it."""

import pytest
from factories import make_node
from torchyard import protocol
from torchyard_server.jobs.control.reports import node_report_state
from torchyard_server.jobs.models import Job, JobNode

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_failed_node_fails_the_job_quoting_every_line_its_supervisor_kept(owner):
    job = Job.objects.create(name="j", owner=owner, status=Job.Status.RUNNING, attempt=0, world_size=2,
                             spec={"fault_tolerance": {"max_restarts": 0}})
    node = make_node(job, node_rank=1, machine_name="gpu-a", host="10.0.0.1", status=JobNode.Status.RUNNING)
    # The error first, then the fault handler's stacks: the supervisor sends its last 20 lines.
    last_lines = [{"rank": 1, "line": "terminate called without an active exception"},
                  {"rank": 1, "line": "Fatal Python error: Aborted"}]
    last_lines += [{"rank": 1, "line": f'  File "train.py", line {n} in step'} for n in range(18)]
    node_report_state(event={"type": protocol.STATE, "job": job.pk, "node": node.pk, "attempt": 0,
                             "status": protocol.NODE_FAILED, "exit_code": 1, "last_lines": last_lines,
                             "reason": "node rank 1: torchrun exited with code 1; rank 1 was killed by SIGABRT"})
    job.refresh_from_db()
    assert job.status == Job.Status.FAILED
    assert job.status_reason.startswith("node 1 (gpu-a): torchrun exited with code 1; rank 1 was killed by SIGABRT")
    assert "[rank 1] terminate called without an active exception" in job.status_reason
    assert job.status_reason.endswith('[rank 1]   File "train.py", line 17 in step')


def test_lines_without_a_rank_are_quoted_as_the_nodes(owner):
    job = Job.objects.create(name="j", owner=owner, status=Job.Status.RUNNING, attempt=0, world_size=1,
                             spec={"fault_tolerance": {"max_restarts": 0}})
    node = make_node(job, node_rank=1, machine_name="gpu-a", host="10.0.0.1", status=JobNode.Status.RUNNING)
    node_report_state(event={"node": node.pk, "status": protocol.NODE_FAILED, "exit_code": 1,
                             "reason": "node rank 1: installing the requirements failed",
                             "last_lines": [{"rank": None, "line": "ERROR: No matching distribution"}]})
    job.refresh_from_db()
    assert job.status_reason.endswith("[node 1] ERROR: No matching distribution")


def test_a_node_that_completed_with_a_warning_puts_it_in_the_jobs_completion(owner):
    job = Job.objects.create(name="j", owner=owner, status=Job.Status.RUNNING, attempt=0, world_size=4,
                             spec={"fault_tolerance": {"max_restarts": 0}})
    first = make_node(job, node_rank=0, machine_name="gpu-a", host="10.0.0.1", status=JobNode.Status.RUNNING)
    second = make_node(job, node_rank=1, machine_name="gpu-b", host="10.0.0.2", status=JobNode.Status.RUNNING)
    node_report_state(event={"node": first.pk, "status": protocol.NODE_COMPLETED, "exit_code": 0,
                             "reason": "node rank 0: every rank exited 0"})
    job.refresh_from_db()
    assert job.status == Job.Status.RUNNING
    warning = ("global rank 3 (pid 42) was still alive 30 s after every other rank of the job exited 0, using no "
               "CPU (hung in c10d::ProcessGroupGloo::~ProcessGroupGloo); its stack was kept and it was ended")
    node_report_state(event={"node": second.pk, "status": protocol.NODE_COMPLETED, "exit_code": 0,
                             "reason": f"node rank 1: every rank's work is done; {warning}", "warning": warning})
    job.refresh_from_db()
    second.refresh_from_db()
    assert job.status == Job.Status.COMPLETED
    assert job.status_reason == f"every node exited 0; warning: node 1 (gpu-b): {warning}"
    assert second.status_reason == f"exited 0; warning: {warning}"
