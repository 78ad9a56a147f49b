"""Controller faults found when tried: one lock order (job, then node), no wait before the first
restart, a machine whose node was lost is not planned on until it heartbeats again, and a machine
with live nodes is not removed behind their back."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction
from factories import bring_online
from torchyard import protocol
from torchyard_server.jobs.control.recovery import recovery_delay
from torchyard_server.jobs.control.reports import node_report_state
from torchyard_server.jobs.control.supervision import _mark_lost
from torchyard_server.jobs.models import Job, JobNode
from torchyard_server.machines.models import Machine
from torchyard_server.machines.services import machine_record_heartbeat

pytestmark = pytest.mark.django_db(transaction=True)


def running_job(owner, machine, *, max_restarts=0) -> tuple[Job, JobNode]:
    job = Job.objects.create(name="j", owner=owner, status=Job.Status.RUNNING, attempt=0, world_size=1,
                             spec={"fault_tolerance": {"max_restarts": max_restarts, "heartbeat_timeout": 10}})
    node = JobNode.objects.create(job=job, attempt=0, machine=machine, machine_name=machine.name, host=machine.host,
                                  node_rank=0, nproc=1, rank_start=0, rank_end=0, status=JobNode.Status.RUNNING)
    return job, node


@pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks need PostgreSQL")
def test_a_node_report_and_a_lost_node_take_their_locks_in_one_order(owner):
    machine, _ = bring_online("gpu-a")
    job, node = running_job(owner, machine)
    errors: list[BaseException] = []

    def report() -> None:
        try:
            node_report_state(event={"node": node.pk, "status": protocol.NODE_FAILED, "reason": "exit 1"})
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    with transaction.atomic():
        # As _mark_lost does: the job first. The report, started meanwhile, must wait for the job
        # too instead of taking the node: the old order (node, then job) deadlocked here.
        Job.objects.select_for_update().get(pk=job.pk)
        reporter = threading.Thread(target=report)
        reporter.start()
        reporter.join(timeout=1.5)
        assert reporter.is_alive(), "the report did not wait for the job's lock"
        JobNode.objects.select_for_update().get(pk=node.pk)
    reporter.join(timeout=10)
    assert not errors, errors
    assert JobNode.objects.get(pk=node.pk).status == JobNode.Status.FAILED


def test_the_first_restart_goes_at_once_and_later_ones_back_off():
    assert [recovery_delay(n) for n in (0, 1, 2, 3, 4, 8)] == [0.0, 0.0, 2.0, 4.0, 8.0, 60.0]
    # The Rust coordinator's schedule: 500 ms, then doubling.
    assert [recovery_delay(n, 0.5) for n in (1, 2, 3, 4, 9)] == [0.5, 1.0, 2.0, 4.0, 60.0]


def test_a_machine_whose_node_was_lost_is_not_planned_on_until_it_heartbeats(owner):
    machine, token = bring_online("gpu-a")
    _, node = running_job(owner, machine, max_restarts=1)
    _mark_lost(node, "node 0 (gpu-a) lost: no heartbeat for 10s")
    machine.refresh_from_db()
    assert machine.status == Machine.Status.OFFLINE and not machine.is_schedulable
    machine_record_heartbeat(event={"machine": machine.pk, "token": token, "capabilities": machine.capabilities})
    machine.refresh_from_db()
    assert machine.status == Machine.Status.ONLINE


def test_a_machine_with_live_nodes_is_removed_only_with_force_which_stops_them(staff_api, owner):
    machine, _ = bring_online("gpu-a")
    job, node = running_job(owner, machine)
    refused = staff_api.delete(f"/api/machines/{machine.pk}")
    assert refused.status_code == 409
    assert "runs 1 live node(s) of job(s) #" in refused.json()["detail"] and refused.json()["live_nodes"][0]["job"] == job.pk
    assert staff_api.delete(f"/api/network/machines/by-name/{machine.name}").status_code == 409
    assert Machine.objects.filter(pk=machine.pk).exists()
    assert staff_api.delete(f"/api/machines/{machine.pk}?force=true").status_code == 204
    node.refresh_from_db()
    job.refresh_from_db()
    assert node.status == JobNode.Status.LOST and "its machine was removed" in node.status_reason
    assert job.status == Job.Status.FAILED  # max_restarts 0; with restarts left it would recover elsewhere
    assert not Machine.objects.filter(pk=machine.pk).exists()
