"""Agent heartbeats applied in bulk (machines.services.machine_record_heartbeats): one UPDATE per batch
on PostgreSQL, one per machine elsewhere; both must say the same thing about every machine."""

from __future__ import annotations

import pytest
from torchyard import protocol
from torchyard_server.machines import services
from torchyard_server.machines.models import Machine
from torchyard_server.machines.services import machine_create, machine_record_heartbeats

pytestmark = pytest.mark.django_db

M = Machine.Status


@pytest.fixture(params=["one UPDATE", "one by one"])
def path(request, monkeypatch):
    """Every test runs through the PostgreSQL statement and through the portable fallback."""
    if request.param == "one by one":
        monkeypatch.setattr(services, "_heartbeats_in_one_update", services._heartbeats_one_by_one)
    return request.param


def beat(machine: Machine, token: str, **fields) -> dict:
    return {"type": protocol.MACHINE_HEARTBEAT, "machine": machine.pk, "token": token, "agent_version": "1.2",
            "capabilities": {"cpu_count": 8, "gpu_count": 0, "gpus": []}, "cache": {"bundles": 1},
            "load": {"cpu_usage": 12.5, "memory_usage": 40.0, "gpu_usage": []}, "running": [], **fields}


def test_a_batch_brings_every_machine_online_with_what_its_agent_reported(path):
    machines = [machine_create(name=f"m{i}", host="10.0.0.1") for i in range(5)]
    applied = machine_record_heartbeats(events=[beat(m, t) for m, t in machines])
    assert sorted(applied) == sorted(m.pk for m, _ in machines)
    for machine in Machine.objects.all():
        assert machine.status == M.ONLINE
        assert machine.capabilities == {"cpu_count": 8, "gpu_count": 0, "gpus": [], "cache": {"bundles": 1}}
        assert machine.current_load == {"cpu_usage": 12.5, "memory_usage": 40.0, "gpu_usage": []}
        assert machine.agent_version == "1.2"
        assert machine.last_heartbeat is not None


def test_each_machine_gets_the_status_its_own_beat_and_drain_say(path):
    (idle, idle_token), (running, running_token), (drained, drained_token) = (
        machine_create(name=n, host="10.0.0.1") for n in ("idle", "running", "drained"))
    Machine.objects.filter(pk=drained.pk).update(drained=True, status=M.OFFLINE)
    machine_record_heartbeats(events=[beat(idle, idle_token), beat(running, running_token, running=[{"pid": 1}]),
                                      beat(drained, drained_token, running=[{"pid": 2}])])
    status = dict(Machine.objects.values_list("name", "status"))
    assert status == {"idle": M.ONLINE, "running": M.BUSY, "drained": M.DRAINING}


def test_a_wrong_token_in_a_batch_changes_nothing_of_its_machine_and_the_others_still_apply(path):
    (honest, token), (victim, _) = (machine_create(name=n, host="10.0.0.1") for n in ("honest", "victim"))
    forged = protocol.make_machine_token(victim.pk, "not-its-secret")
    applied = machine_record_heartbeats(events=[beat(victim, forged), beat(honest, token), {"token": "garbage"}])
    assert applied == [honest.pk]
    victim.refresh_from_db()
    assert victim.status == M.PENDING and victim.last_heartbeat is None and victim.current_load == {}


def test_the_last_of_several_beats_of_one_machine_counts(path):
    machine, token = machine_create(name="m", host="10.0.0.1")
    machine_record_heartbeats(events=[beat(machine, token, load={"cpu_usage": 1.0}),
                                      beat(machine, token, load={"cpu_usage": 2.0})])
    machine.refresh_from_db()
    assert machine.current_load == {"cpu_usage": 2.0}


def test_a_beat_without_capabilities_keeps_the_stored_ones_and_updates_the_cache(path):
    machine, token = machine_create(name="m", host="10.0.0.1")
    machine_record_heartbeats(events=[beat(machine, token)])
    machine_record_heartbeats(events=[beat(machine, token, capabilities=None, cache={"bundles": 2})])
    machine.refresh_from_db()
    assert machine.capabilities == {"cpu_count": 8, "gpu_count": 0, "gpus": [], "cache": {"bundles": 2}}


def test_a_removed_machine_and_an_empty_batch_apply_nothing(path):
    machine, token = machine_create(name="m", host="10.0.0.1")
    Machine.objects.filter(pk=machine.pk).delete()
    assert machine_record_heartbeats(events=[beat(machine, token)]) == []
    assert machine_record_heartbeats(events=[]) == []


# `torchyard agent --addr HOST` (the Go scheduler's worker --addr): the address the other machines reach
# it at becomes the machine's host, the master address of the jobs whose node 0 it runs.
def test_the_address_an_agent_gives_becomes_its_machines_host_and_none_keeps_the_registered_one(path):
    (given, given_token), (silent, silent_token) = (machine_create(name=n, host="10.0.0.1") for n in ("given", "silent"))
    machine_record_heartbeats(events=[beat(given, given_token, host="192.168.7.20"), beat(silent, silent_token)])
    assert dict(Machine.objects.values_list("name", "host")) == {"given": "192.168.7.20", "silent": "10.0.0.1"}
    # The agent restarted without --addr: its machine keeps the last address it gave.
    machine_record_heartbeats(events=[beat(given, given_token)])
    assert Machine.objects.get(pk=given.pk).host == "192.168.7.20"
