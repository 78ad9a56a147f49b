"""Quarantine: a hang's verdict takes a machine off the planner's list until an operator releases it
or its own health check passes after the probation (machines.services, machines.tasks, the agent's
health check in workers/torchyard/agent/health.py, POST /api/agent/health)."""

from __future__ import annotations

import sys
from datetime import timedelta

import pytest
import redis
from django.conf import settings
from django.test import override_settings
from django.utils import timezone
from torchyard import protocol
from torchyard.agent import health
from torchyard_server.audit.models import AuditEntry
from torchyard_server.machines import services
from torchyard_server.machines.models import Machine
from torchyard_server.machines.services import (
    machine_create,
    machine_quarantine,
    machine_record_health,
    machine_record_heartbeats,
    machine_release,
)
from torchyard_server.machines.tasks import ask_health_checks

M = Machine.Status
PASSED = {"ok": True, "checks": [{"name": "torch", "ok": True, "detail": "torch 2.13.0", "seconds": 1.2}]}
FAILED = {"ok": False, "checks": [{"name": "torch", "ok": True, "detail": "torch 2.13.0", "seconds": 1.2},
                                  {"name": "gpu", "ok": False, "detail": "CUDA is not available", "seconds": 0.1}]}


def online(name: str = "m1") -> tuple[Machine, str]:
    machine, token = machine_create(name=name, host="10.0.0.1")
    machine_record_heartbeats(events=[beat(machine, token)])
    machine.refresh_from_db()
    return machine, token


def beat(machine: Machine, token: str, **fields) -> dict:
    return {"type": protocol.MACHINE_HEARTBEAT, "machine": machine.pk, "token": token, "agent_version": "1.2",
            "capabilities": {"cpu_count": 8}, "running": [], **fields}


def row(machine: Machine) -> Machine:
    return Machine.objects.get(pk=machine.pk)


@pytest.fixture(params=["one UPDATE", "one by one"])
def heartbeat_path(request, monkeypatch):
    """Heartbeats through the PostgreSQL statement and through the portable fallback."""
    if request.param == "one by one":
        monkeypatch.setattr(services, "_heartbeats_in_one_update", services._heartbeats_one_by_one)
    return request.param


@pytest.mark.django_db
def test_a_quarantine_moves_a_reporting_machine_at_once_keeps_its_first_reason_and_is_audited():
    machine, _ = online()
    with override_settings(QUARANTINE_PROBATION=600.0):
        assert machine_quarantine(machine_id=machine.pk, reason="rank 1 held job #7", job_id=7)
        assert machine_quarantine(machine_id=machine.pk, reason="rank 3 held job #8", job_id=8)
    found = row(machine)
    assert (found.status, found.quarantine_reason, found.quarantine_job) == (M.QUARANTINED, "rank 1 held job #7", 7)
    assert timedelta(minutes=9) < found.probation_until - found.quarantined_at <= timedelta(minutes=10)
    entries = AuditEntry.objects.filter(action="machine.quarantine", target_id=str(machine.pk))
    assert [(e.actor_label, e.detail) for e in entries] == [("system", {"reason": "rank 1 held job #7", "job": 7})]
    assert not machine_quarantine(machine_id=machine.pk + 1000, reason="gone", job_id=7)


@pytest.mark.django_db
def test_without_a_probation_only_an_operator_releases():
    machine, _ = online()
    with override_settings(QUARANTINE_PROBATION=0.0):
        machine_quarantine(machine_id=machine.pk, reason="rank 0 held job #1", job_id=1)
    assert row(machine).probation_until is None
    assert ask_health_checks() == []
    # A pass the controller never asked for releases nothing.
    assert machine_record_health(machine=row(machine), report=PASSED).status == M.QUARANTINED


@pytest.mark.django_db
def test_heartbeats_keep_a_machine_quarantined_and_an_offline_one_comes_back_quarantined(heartbeat_path):
    (busy, busy_token), (quiet, quiet_token) = online("busy"), online("quiet")
    for machine in (busy, quiet):
        machine_quarantine(machine_id=machine.pk, reason="held a job", job_id=1)
    Machine.objects.filter(pk=quiet.pk).update(status=M.OFFLINE)
    machine_record_heartbeats(events=[beat(busy, busy_token, running=[{"pid": 1}]), beat(quiet, quiet_token)])
    assert (row(busy).status, row(quiet).status) == (M.QUARANTINED, M.QUARANTINED)
    # Released, the next beat says what the agent runs again.
    machine_release(machine=busy, actor="test")
    machine_record_heartbeats(events=[beat(busy, busy_token, running=[{"pid": 1}])])
    assert row(busy).status == M.BUSY


@pytest.mark.django_db
def test_an_operator_release_restores_a_drain_and_is_audited():
    machine, _ = online()
    Machine.objects.filter(pk=machine.pk).update(drained=True)
    machine_quarantine(machine_id=machine.pk, reason="held a job", job_id=3)
    assert row(machine).status == M.QUARANTINED
    released = machine_release(machine=row(machine), actor="ops", why="released by an operator")
    assert (released.status, released.quarantined_at, released.quarantine_reason, released.quarantine_job,
            released.probation_until) == (M.DRAINING, None, "", None, None)
    entry = AuditEntry.objects.get(action="machine.release", target_id=str(machine.pk))
    assert (entry.actor_label, entry.detail) == ("ops", {"quarantine_reason": "held a job", "why": "released by an operator"})
    # Releasing a machine that is not quarantined changes nothing.
    assert machine_release(machine=released, actor="ops").status == M.DRAINING
    assert AuditEntry.objects.filter(action="machine.release").count() == 1


@pytest.mark.django_db
def test_after_the_probation_its_agent_is_asked_once_a_pass_releases_and_a_failure_starts_another():
    (due, _), (waiting, _) = online("due"), online("waiting")
    with override_settings(QUARANTINE_PROBATION=600.0):
        for machine in (due, waiting):
            machine_quarantine(machine_id=machine.pk, reason="held a job", job_id=1)
        Machine.objects.filter(pk=due.pk).update(probation_until=timezone.now() - timedelta(seconds=1))
        queue = redis.Redis.from_url(settings.CELERY_BROKER_URL)
        queue.delete(protocol.machine_queue(due.pk), protocol.machine_queue(waiting.pk))

        assert ask_health_checks() == [due.pk]
        assert ask_health_checks() == []  # asked: not again until HEALTH_CHECK_WAIT_S has passed
        assert queue.llen(protocol.machine_queue(due.pk)) == 1 and queue.llen(protocol.machine_queue(waiting.pk)) == 0
        assert row(due).probation_until > timezone.now() + timedelta(seconds=services.HEALTH_CHECK_WAIT_S - 5)

        failed = machine_record_health(machine=row(due), report=FAILED)
        assert failed.status == M.QUARANTINED and failed.health["ok"] is False
        assert failed.health["checks"][1] == FAILED["checks"][1]
        assert failed.probation_until > timezone.now() + timedelta(minutes=9)

        Machine.objects.filter(pk=due.pk).update(probation_until=timezone.now() - timedelta(seconds=1))
        assert ask_health_checks() == [due.pk]
        passed = machine_record_health(machine=row(due), report=PASSED)
    assert (passed.status, passed.quarantined_at, passed.health["ok"]) == (M.ONLINE, None, True)
    entry = AuditEntry.objects.get(action="machine.release", target_id=str(due.pk))
    assert (entry.actor_label, entry.detail["why"]) == ("system", "its health check passed after the probation")
    assert row(waiting).status == M.QUARANTINED


@pytest.mark.django_db
def test_the_agent_reports_its_health_check_with_its_machine_token(anonymous):
    api = anonymous
    machine, token = online()
    machine_quarantine(machine_id=machine.pk, reason="held a job", job_id=1)
    Machine.objects.filter(pk=machine.pk).update(health={"asked_at": timezone.now().isoformat()})
    refused = api.post(protocol.HEALTH_PATH, PASSED, format="json", HTTP_AUTHORIZATION="Machine nope")
    assert refused.status_code == 401
    bad = api.post(protocol.HEALTH_PATH, {"ok": "maybe", "checks": [{"name": "x"}]}, format="json",
                   HTTP_AUTHORIZATION=f"Machine {token}")
    assert bad.status_code == 400 and {"ok", "checks"} <= bad.json().keys()
    assert row(machine).status == M.QUARANTINED
    answer = api.post(protocol.HEALTH_PATH, PASSED, format="json", HTTP_AUTHORIZATION=f"Machine {token}")
    assert answer.status_code == 200, answer.content
    assert answer.json()["status"] == "online" and answer.json()["health"]["ok"] is True


# --- the agent's side: the checks run for real in this Python -------------------------------------
def test_the_checks_pass_on_a_healthy_machine(tmp_path):
    result = health.run_checks(sys.executable, tmp_path, "127.0.0.1", timeout=120)
    assert result["ok"], result
    assert [c["name"] for c in result["checks"]] == ["torch", "compute", "collective", "disk"]
    assert not (tmp_path / "health").exists() or not any((tmp_path / "health").iterdir())


def test_a_check_that_fails_is_named_with_its_cause_and_the_rest_still_run(tmp_path):
    blocked = tmp_path / "work"
    blocked.write_text("a file where the work directory should be")
    result = health.run_checks(sys.executable, blocked, "127.0.0.1", gpus=1, timeout=120)
    by_name = {c["name"]: c for c in result["checks"]}
    assert result["ok"] is False
    assert by_name["torch"]["ok"] and by_name["compute"]["ok"] and by_name["collective"]["ok"]
    assert not by_name["gpu"]["ok"] and "expected" in by_name["gpu"]["detail"]  # this machine has no GPU
    assert not by_name["disk"]["ok"] and "Error" in by_name["disk"]["detail"]


def test_a_python_that_cannot_start_fails_the_check(tmp_path):
    result = health.run_checks(str(tmp_path / "no-python"), tmp_path, "127.0.0.1")
    assert result["ok"] is False and result["checks"][-1]["name"] == "python"
    assert "cannot start" in result["checks"][-1]["detail"]
