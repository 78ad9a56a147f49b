"""The machine state machine (machines/states.py) and the services that move machines through it."""

from datetime import timedelta

import pytest
from django.utils import timezone
from factories import bring_online
from torchyard_server.machines.models import Machine
from torchyard_server.machines.services import (
    machine_mark_stale_offline,
    machine_mark_suspect,
    machine_record_heartbeat,
    machine_update,
)
from torchyard_server.machines.states import (
    MACHINE_TRANSITIONS,
    MACHINE_UP,
    InvalidTransition,
    machine_sources,
    reported_status,
    transition_machine,
    transition_machines,
)

M = Machine.Status
ALL = set(M.values)


def test_every_status_is_in_the_table_and_every_target_is_a_status():
    assert set(MACHINE_TRANSITIONS) == ALL
    assert all(targets <= ALL for targets in MACHINE_TRANSITIONS.values())


@pytest.mark.parametrize("to", [M.ONLINE, M.BUSY, M.DRAINING, M.QUARANTINED])
def test_a_heartbeat_may_move_a_machine_from_any_status(to):
    assert set(machine_sources(to)) == ALL


def test_only_a_machine_whose_agent_reports_can_go_offline():
    assert set(machine_sources(M.OFFLINE)) == set(MACHINE_UP) == {M.ONLINE, M.BUSY, M.DRAINING, M.QUARANTINED}


def test_nothing_moves_a_machine_back_to_pending():
    assert machine_sources(M.PENDING) == []


def test_an_unknown_status_is_refused():
    with pytest.raises(InvalidTransition):
        machine_sources("rebooting")


@pytest.mark.parametrize(("quarantined", "drained", "running", "status"), [
    (False, False, False, M.ONLINE), (False, False, True, M.BUSY), (False, True, False, M.DRAINING),
    (False, True, True, M.DRAINING), (True, False, False, M.QUARANTINED), (True, True, True, M.QUARANTINED),
])
def test_a_heartbeat_says_quarantined_then_draining_then_busy_while_running_online_otherwise(quarantined, drained,
                                                                                            running, status):
    assert reported_status(drained=drained, running=running, quarantined=quarantined) == status


def _machine(status: str, **fields) -> Machine:
    return Machine.objects.create(name=f"m-{status}-{Machine.objects.count()}", host="10.0.0.1", status=status, **fields)


def _status(machine: Machine) -> str:
    return Machine.objects.get(pk=machine.pk).status


@pytest.mark.django_db
def test_a_transition_is_a_conditional_update_that_refuses_what_the_table_does_not_allow():
    pending = _machine(M.PENDING)
    assert not transition_machine(pending, M.OFFLINE)
    assert _status(pending) == M.PENDING and pending.status == M.PENDING
    with pytest.raises(InvalidTransition):
        transition_machine(pending, "gone")
    assert transition_machine(pending, M.ONLINE)
    assert _status(pending) == M.ONLINE and pending.status == M.ONLINE


@pytest.mark.django_db
def test_a_transition_reads_the_status_the_row_has_now_and_only_from_narrows_it():
    machine = _machine(M.ONLINE)
    Machine.objects.filter(pk=machine.pk).update(status=M.OFFLINE)  # another writer, since we read it
    assert not transition_machine(machine, M.DRAINING, only_from=MACHINE_UP)
    assert _status(machine) == M.OFFLINE and machine.status == M.ONLINE


@pytest.mark.django_db
def test_a_bulk_transition_moves_only_the_machines_whose_status_allows_it():
    machines = [_machine(s) for s in (M.PENDING, M.ONLINE, M.BUSY, M.DRAINING, M.QUARANTINED, M.OFFLINE)]
    assert transition_machines(Machine.objects.all(), M.OFFLINE) == 4
    assert [_status(m) for m in machines] == [M.PENDING] + [M.OFFLINE] * 5


@pytest.mark.django_db
def test_the_offline_sweep_takes_quiet_machines_offline_and_leaves_the_rest():
    old = timezone.now() - timedelta(minutes=5)
    quiet = [_machine(s, last_heartbeat=old) for s in (M.ONLINE, M.BUSY, M.DRAINING)]
    fresh = _machine(M.ONLINE, last_heartbeat=timezone.now())
    pending = _machine(M.PENDING)
    assert sorted(machine_mark_stale_offline()) == sorted(m.pk for m in quiet)
    assert [_status(m) for m in quiet] == [M.OFFLINE] * 3
    assert _status(fresh) == M.ONLINE and _status(pending) == M.PENDING
    assert machine_mark_stale_offline() == []


@pytest.mark.django_db
def test_a_suspect_machine_goes_offline_once_and_a_pending_one_is_left_alone():
    machine = _machine(M.BUSY)
    assert machine_mark_suspect(machine_id=machine.pk)
    assert _status(machine) == M.OFFLINE
    assert not machine_mark_suspect(machine_id=machine.pk)
    assert not machine_mark_suspect(machine_id=_machine(M.PENDING).pk)


@pytest.mark.django_db
def test_a_heartbeat_brings_an_offline_machine_back_and_keeps_a_drain():
    machine, token = bring_online("hb")
    beat = {"machine": machine.pk, "token": token, "capabilities": machine.capabilities}
    assert machine_mark_suspect(machine_id=machine.pk)
    assert machine_record_heartbeat(event={**beat, "running": [{"pid": 1}]}).status == M.BUSY
    Machine.objects.filter(pk=machine.pk).update(drained=True, status=M.OFFLINE)
    assert machine_record_heartbeat(event=beat).status == M.DRAINING
    assert _status(machine) == M.DRAINING


@pytest.mark.django_db
def test_a_drain_moves_a_reporting_machine_at_once_and_an_offline_one_only_keeps_the_flag():
    busy = _machine(M.BUSY)
    assert machine_update(machine=busy, status=M.DRAINING).status == M.DRAINING
    assert _status(busy) == M.DRAINING and Machine.objects.get(pk=busy.pk).drained
    assert machine_update(machine=busy, status=M.ONLINE).status == M.ONLINE
    assert not Machine.objects.get(pk=busy.pk).drained

    for status in (M.OFFLINE, M.PENDING):
        quiet = _machine(status)
        machine_update(machine=quiet, status=M.DRAINING)
        row = Machine.objects.get(pk=quiet.pk)
        assert row.status == status and row.drained
