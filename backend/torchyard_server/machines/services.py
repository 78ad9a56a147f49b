from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, TypedDict

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from torchyard import protocol

from ..audit import services as audit
from ..celery import app as celery_app
from . import redis_acl
from .models import Machine
from .registries import machine_removing
from .states import (
    MACHINE_UP,
    drain_status,
    machine_sources,
    reported_status,
    transition_machine,
    transition_machines,
)

log = logging.getLogger(__name__)


def machine_create(*, name: str, host: str, port: int = 8001, labels: dict | None = None) -> tuple[Machine, str]:
    """Register a machine; returns it with its agent token, which is shown once and stored hashed."""
    secret = secrets.token_urlsafe(32)
    with transaction.atomic():
        machine = Machine.objects.create(
            name=name, host=host, port=port, labels=labels or {}, token_hash=Machine.hash_secret(secret)
        )
        audit.record(None, audit.Action.MACHINE_ADD, machine, host=host, port=port, labels=labels or {})
        transaction.on_commit(lambda: redis_acl.try_ensure_user(machine))
    return machine, protocol.make_machine_token(machine.pk, secret)


def machine_rotate_token(*, machine: Machine) -> str:
    """A new token for the same machine (its id, history and jobs stay); the old one is refused from
    now on, so an agent still running with it must be restarted with the new one. Its Redis
    password changes with it (connections already open stay open)."""
    secret = secrets.token_urlsafe(32)
    machine.token_hash = Machine.hash_secret(secret)
    with transaction.atomic():
        Machine.objects.filter(pk=machine.pk).update(token_hash=machine.token_hash, updated_at=timezone.now())
        audit.record(None, audit.Action.MACHINE_ROTATE_TOKEN, machine)
        transaction.on_commit(lambda: redis_acl.try_ensure_user(machine))
    return protocol.make_machine_token(machine.pk, secret)


def machine_authenticate(*, token: str) -> Machine | None:
    """The machine a token belongs to, or None. Compares hashes in constant time."""
    try:
        machine_id, secret = protocol.parse_machine_token(token)
    except ValueError:
        return None
    machine = Machine.objects.filter(pk=machine_id).first()
    if machine is None or not secrets.compare_digest(machine.token_hash, Machine.hash_secret(secret)):
        return None
    return machine


def machine_record_heartbeat(*, event: protocol.MachineHeartbeat) -> Machine | None:
    """Apply one agent heartbeat (machine_record_heartbeats); the machine, or None when its token
    is wrong."""
    applied = machine_record_heartbeats(events=[event])
    return Machine.objects.get(pk=applied[0]) if applied else None


# A heartbeat says online, busy, draining or quarantined: the statuses every one of those may be
# reached from (all of them, as the table stands: a pending machine's first beat, an offline one's return).
HEARTBEAT_FROM = sorted(set.intersection(*(set(machine_sources(s)) for s in (
    Machine.Status.ONLINE, Machine.Status.BUSY, Machine.Status.DRAINING, Machine.Status.QUARANTINED))))


def machine_record_heartbeats(*, events: list[protocol.MachineHeartbeat]) -> list[int]:
    """Apply agent heartbeats: capabilities, load, version, the host its agent gives (`torchyard agent
    --addr`; the registered one stays otherwise), and the status each says (quarantined while
    quarantined, draining while drained, busy while its agent runs nodes, online otherwise);
    returns the machines' ids.

    Heartbeats with a wrong token are ignored: Redis is shared infrastructure, the token is what
    proves which machine is talking. Of several beats of one machine, the last counts. A thousand
    agents beat 500 times a second, so a batch is one UPDATE on PostgreSQL, whatever its size."""
    claimed: dict[int, tuple[str, protocol.MachineHeartbeat]] = {}
    for event in events:
        try:
            machine_id, secret = protocol.parse_machine_token(str(event.get("token", "")))
        except ValueError:
            continue
        claimed[machine_id] = (Machine.hash_secret(secret), event)
    if not claimed:
        return []
    if connection.vendor == "postgresql":
        return _heartbeats_in_one_update(claimed, timezone.now())
    return _heartbeats_one_by_one(claimed, timezone.now())


def _heartbeat_values(event: protocol.MachineHeartbeat) -> tuple[
        protocol.Capabilities | None, Mapping[str, object], Mapping[str, object], str, bool, str]:
    """capabilities (None: keep the stored ones), cache, load, agent version, running, host ("": keep
    the stored one)."""
    return (event.get("capabilities") or None, event.get("cache") or {}, event.get("load") or {},
            str(event.get("agent_version", ""))[:64], bool(event.get("running")),
            str(event.get("host") or "")[:Machine._meta.get_field("host").max_length])


def _heartbeats_in_one_update(claimed: dict[int, tuple[str, protocol.MachineHeartbeat]], now: Any) -> list[int]:
    # The status is worked out from the row's own `quarantined_at` and `drained` inside the UPDATE
    # (reported_status's rule), so a drain or a quarantine landing meanwhile is never overwritten. The token check compares SHA-256 hashes, as the lookup does.
    rows = []
    for machine_id, (token_hash, event) in claimed.items():
        capabilities, cache, load, version, running, host = _heartbeat_values(event)
        rows.append({"id": machine_id, "token_hash": token_hash, "capabilities": capabilities, "cache": cache,
                     "load": load, "agent_version": version, "running": running, "host": host})
    table = connection.ops.quote_name(Machine._meta.db_table)
    # The rows as one JSON parameter, written by the json module in C: a thousand rows are one
    # parameter, not seven thousand, and not seven arrays, whose elements psycopg quotes one by one
    # in Python (most of a batch's time, profiled).
    sql = f"""
        UPDATE {table} AS m SET
            status = CASE WHEN m.quarantined_at IS NOT NULL THEN %s WHEN m.drained THEN %s
                          WHEN v.running THEN %s ELSE %s END,
            -- What its caches hold (bundles, environments) rides along: it is what makes a launch fast.
            capabilities = COALESCE(v.capabilities, m.capabilities) || jsonb_build_object('cache', v.cache),
            current_load = v.load, agent_version = v.agent_version, host = COALESCE(NULLIF(v.host, ''), m.host),
            last_heartbeat = %s, updated_at = %s
        FROM json_to_recordset(%s::json)
            AS v(id bigint, token_hash text, capabilities jsonb, cache jsonb, load jsonb, agent_version text, running boolean,
                 host text)
        WHERE m.id = v.id AND m.token_hash = v.token_hash AND m.status = ANY(%s)
        RETURNING m.id"""
    statuses = [Machine.Status.QUARANTINED, Machine.Status.DRAINING, Machine.Status.BUSY,
                Machine.Status.ONLINE]  # as reported_status says
    with connection.cursor() as cursor:
        cursor.execute(sql, [*statuses, now, now, json.dumps(rows), HEARTBEAT_FROM])
        return [row[0] for row in cursor.fetchall()]


def _heartbeats_one_by_one(claimed: dict[int, tuple[str, protocol.MachineHeartbeat]], now: Any) -> list[int]:
    """Elsewhere than PostgreSQL (the embedded SQLite, a few machines): one UPDATE per machine,
    in one transaction."""
    applied = []
    with transaction.atomic():
        stored = {pk: (drained, quarantined, caps) for pk, drained, quarantined, caps in
                  Machine.objects.filter(pk__in=claimed).values_list("pk", "drained", "quarantined_at", "capabilities")}
        for machine_id, (token_hash, event) in claimed.items():
            if machine_id not in stored:
                continue
            drained, quarantined_at, stored_capabilities = stored[machine_id]
            capabilities, cache, load, version, running, host = _heartbeat_values(event)
            # Only while `drained` and the quarantine are what was read: one landing meanwhile is
            # never overwritten.
            if Machine.objects.filter(pk=machine_id, token_hash=token_hash, drained=drained,
                                      quarantined_at__isnull=quarantined_at is None,
                                      status__in=HEARTBEAT_FROM).update(
                    status=reported_status(drained=drained, running=running, quarantined=quarantined_at is not None),
                    capabilities={**(capabilities or stored_capabilities), "cache": cache},
                    current_load=load, agent_version=version, last_heartbeat=now, updated_at=now,
                    **({"host": host} if host else {})):
                applied.append(machine_id)
    return applied


def machine_mark_stale_offline() -> list[int]:
    """Machines whose agent stopped reporting go offline; returns their ids."""
    cutoff = timezone.now() - timedelta(seconds=settings.MACHINE_OFFLINE_AFTER)
    stale = Machine.objects.filter(status__in=MACHINE_UP, last_heartbeat__lt=cutoff)
    ids = list(stale.values_list("pk", flat=True))
    if ids:
        # The cutoff is checked again in the UPDATE: a heartbeat that lands in between keeps its machine.
        transition_machines(Machine.objects.filter(pk__in=ids, last_heartbeat__lt=cutoff), Machine.Status.OFFLINE)
    return ids


def machine_mark_suspect(*, machine_id: int) -> bool:
    """A node on this machine was lost: take it off the planner's list (offline) until its agent
    heartbeats again, so a relaunch goes to a spare instead of back to a machine that may be gone.
    A live agent's next heartbeat, 2 s later at most, brings it back."""
    return bool(transition_machines(Machine.objects.filter(pk=machine_id), Machine.Status.OFFLINE))


def machine_quarantine(*, machine_id: int, reason: str, job_id: int | None = None) -> bool:
    """A hang's verdict named a rank on this machine as the one that held its job: nothing is placed
    here until an operator releases it (machine_release) or, after settings.QUARANTINE_PROBATION
    seconds, its agent's health check passes (machine_record_health). A machine already quarantined
    keeps its first reason. False when the machine is gone."""
    now = timezone.now()
    probation = settings.QUARANTINE_PROBATION
    with transaction.atomic():
        machine = Machine.objects.select_for_update().filter(pk=machine_id).first()
        if machine is None:
            return False
        if machine.quarantined_at is not None:
            return True
        fields = {"quarantined_at": now, "quarantine_reason": reason[:500], "quarantine_job": job_id,
                  "probation_until": now + timedelta(seconds=probation) if probation > 0 else None,
                  "updated_at": now}
        # The status at once when its agent reports; an offline one keeps its status and comes back
        # quarantined with its next heartbeat.
        if not transition_machine(machine, Machine.Status.QUARANTINED, only_from=MACHINE_UP, **fields):
            _update(machine, **fields)
        audit.record(audit.SYSTEM, audit.Action.MACHINE_QUARANTINE, machine, reason=reason[:500], job=job_id)
    return True


def machine_release(*, machine: Machine, why: str = "", actor: Any = None) -> Machine:
    """End the quarantine: an operator vouches for the machine (`actor` None: the request's user), or
    its health check passed after the probation (`why` says so, `actor` is the system)."""
    with transaction.atomic():
        locked = Machine.objects.select_for_update().get(pk=machine.pk)
        if locked.quarantined_at is None:
            return locked
        reason = locked.quarantine_reason
        cleared = {"quarantined_at": None, "quarantine_reason": "", "quarantine_job": None,
                   "probation_until": None, "updated_at": timezone.now()}
        if not transition_machine(locked, drain_status(drained=locked.drained),
                                  only_from=[Machine.Status.QUARANTINED], **cleared):
            _update(locked, **cleared)  # offline: its next heartbeat sets the status
        audit.record(actor, audit.Action.MACHINE_RELEASE, locked, quarantine_reason=reason, why=why)
    return locked


def machine_record_health(*, machine: Machine, report: protocol.HealthReport) -> Machine:
    """A health check its agent ran (agent/health.py), kept on the machine. For a quarantined machine
    the controller asked (machines_due_a_health_check: its probation was over), a pass releases it and
    a failure starts another probation; a report nobody asked for changes nothing else."""
    ok = report.get("ok") is True
    asked = machine.quarantined_at is not None and bool((machine.health or {}).get("asked_at"))
    health = {"at": timezone.now().isoformat(), "ok": ok, "checks": list(report.get("checks") or [])[:20]}
    _update(machine, health=health)
    if asked and ok:
        return machine_release(machine=machine, actor=audit.SYSTEM, why="its health check passed after the probation")
    if asked:
        failed = "; ".join(f"{c.get('name')}: {c.get('detail')}" for c in health["checks"] if not c.get("ok"))
        probation_until = timezone.now() + timedelta(seconds=max(settings.QUARANTINE_PROBATION, 1.0))
        if Machine.objects.filter(pk=machine.pk, quarantined_at__isnull=False).update(probation_until=probation_until):
            machine.probation_until = probation_until
        log.warning("machine %s failed its health check and stays quarantined: %s", machine.name, failed or "?")
    return machine


def _update(machine: Machine, **fields: Any) -> None:
    """One UPDATE of `fields` on the machine's row, mirrored on the instance (no reread)."""
    Machine.objects.filter(pk=machine.pk).update(**fields)
    for name, value in fields.items():
        setattr(machine, name, value)


# How long a health check may take to answer before its machine is asked again.
HEALTH_CHECK_WAIT_S = 120.0


class InterfaceFigure(TypedDict):
    """What a job's preflight measured on one interface of a machine (Machine.measured_links)."""

    mb_per_s: float  # the median over the pairs it was in
    latency_ms: float
    pairs: int
    job: int  # the job whose preflight measured it
    measured_at: float  # epoch seconds


def machines_record_links(*, figures: dict[str, dict[str, InterfaceFigure]]) -> None:
    """Record what a job's preflight measured on machines' interfaces ({machine name: {interface:
    figure}}): each interface keeps its latest figure, the others theirs."""
    with transaction.atomic():
        for machine in Machine.objects.select_for_update().filter(name__in=sorted(figures)).order_by("pk"):
            measured = {**(machine.measured_links or {}), **figures[machine.name]}
            Machine.objects.filter(pk=machine.pk).update(measured_links=measured)


def machines_due_a_health_check() -> list[Machine]:
    """Quarantined machines whose agent reports and whose probation is over, each asked once: the
    probation moves on by HEALTH_CHECK_WAIT_S, so a check that never answers is asked again then,
    and `health.asked_at` says an answer is awaited."""
    now = timezone.now()
    due = list(Machine.objects.filter(status=Machine.Status.QUARANTINED, quarantined_at__isnull=False,
                                      probation_until__lte=now))
    for machine in due:
        Machine.objects.filter(pk=machine.pk).update(
            probation_until=now + timedelta(seconds=HEALTH_CHECK_WAIT_S),
            health={**(machine.health or {}), "asked_at": now.isoformat()})
    return due


def machine_update(*, machine: Machine, **fields: Any) -> Machine:
    """Change host, port, labels, volumes or prices; `status` "draining" / "online" sets or clears the drain, and moves
    a machine whose agent reports at once (an offline or pending machine keeps its status until its
    agent reports, then takes the drain into account)."""
    status = fields.pop("status", None)
    if status is not None:
        fields["drained"] = status == Machine.Status.DRAINING
    before = {key: getattr(machine, key) for key in fields}
    for key, value in fields.items():
        setattr(machine, key, value)
    with transaction.atomic():
        machine.save(update_fields=[*fields, "updated_at"])
        if status is not None:
            transition_machine(machine, drain_status(drained=fields["drained"],
                                                     quarantined=machine.quarantined_at is not None),
                               only_from=MACHINE_UP)
        _audit_update(machine, before, fields)
    return machine


def _audit_update(machine: Machine, before: dict[str, Any], after: dict[str, Any]) -> None:
    """A drain (or its undoing) is an entry of its own; a change of host, port, labels or prices another."""
    if "drained" in after:
        action = audit.Action.MACHINE_DRAIN if after["drained"] else audit.Action.MACHINE_UNDRAIN
        audit.record(None, action, machine, was_drained=before["drained"])
    changed = {key: {"from": before[key], "to": value} for key, value in after.items()
               if key != "drained" and before[key] != value}
    if changed:
        audit.record(None, audit.Action.MACHINE_UPDATE, machine, changed=changed)


class LiveNodeHere(TypedDict):
    """A node of a live job on a machine being removed, as the 409 names it."""

    job: int
    node_rank: int
    attempt: int
    status: str


class MachineInUse(Exception):
    """A machine that still runs nodes of live jobs cannot be removed without force (409)."""

    def __init__(self, message: str, live_nodes: list[LiveNodeHere]) -> None:
        super().__init__(message)
        self.live_nodes = live_nodes


def machine_delete(*, machine: Machine, force: bool = False) -> None:
    """Remove a machine: its token stops authenticating with the row, the ingest loop drops what its
    streams still carry, and its agent is told to stop (after the stops of its nodes, which the
    jobs app queues first on the same queue). Its Redis user goes once the agent took those
    (redis_acl.sync_agent_users)."""
    machine_id = machine.pk
    with transaction.atomic():
        # The jobs app answers (registries.machine_removals): it refuses while live nodes run there.
        machine_removing(machine=machine, force=force)
        audit.record(None, audit.Action.MACHINE_REMOVE, machine, force=force)
        machine.delete()
        transaction.on_commit(lambda: celery_app.send_task(
            protocol.TASK_SHUTDOWN, kwargs={"reason": f"machine {machine_id} was removed from the control plane"},
            queue=protocol.machine_queue(machine_id)))
