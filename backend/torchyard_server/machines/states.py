"""The machine state machine. A machine's status is what its agent last said (or that it went
quiet); `drained`, the operator's intent, and `quarantined_at`, the control plane's verdict, are kept
apart from it, so a drained (quarantined) machine that drops offline comes back draining (quarantined). Every status change is checked here and applied as a conditional
UPDATE from the statuses allowed to reach the target: a heartbeat (ingest), the offline sweep and a
lost node (controller) and a drain (API) may race on one row, and none of them can move it along an
edge this table does not have."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db.models import QuerySet

from .models import Machine

M = Machine.Status

# A heartbeat, from any status (a pending machine's first, an offline one's return), says online,
# busy, draining or quarantined, and says it again on every beat. Going quiet, or losing a node,
# takes a machine whose agent reports offline. A drain moves it between online/busy and draining, a
# quarantine (or its release) between any of those and quarantined. Nothing but its first heartbeat
# moves a pending machine.
_REPORTED = {M.ONLINE, M.BUSY, M.DRAINING, M.QUARANTINED}
MACHINE_TRANSITIONS: dict[str, set[str]] = {
    M.PENDING: set(_REPORTED),
    M.ONLINE: {*_REPORTED, M.OFFLINE},
    M.BUSY: {*_REPORTED, M.OFFLINE},
    M.DRAINING: {*_REPORTED, M.OFFLINE},
    M.QUARANTINED: {*_REPORTED, M.OFFLINE},
    M.OFFLINE: set(_REPORTED),
}
# Its agent reports: what the offline sweep watches, and what a drain or a quarantine changes at once.
MACHINE_UP = frozenset(_REPORTED)
# The planner places nodes here.
MACHINE_SCHEDULABLE = frozenset({M.ONLINE, M.BUSY})


class InvalidTransition(Exception):
    pass


def machine_sources(to: str) -> list[str]:
    """The statuses a machine may be in to move to `to`."""
    if to not in MACHINE_TRANSITIONS:
        raise InvalidTransition(f"unknown machine status {to!r}")
    return [src for src, targets in MACHINE_TRANSITIONS.items() if to in targets]


def reported_status(*, drained: bool, running: bool, quarantined: bool = False) -> str:
    """What a heartbeat says the machine is: quarantined while the control plane's quarantine holds,
    draining while the operator's drain holds, busy while its agent runs nodes, online otherwise."""
    if quarantined:
        return M.QUARANTINED
    if drained:
        return M.DRAINING
    return M.BUSY if running else M.ONLINE


def drain_status(*, drained: bool, quarantined: bool = False) -> str:
    """Where a drain, a quarantine (or their ends) move a machine whose agent reports."""
    if quarantined:
        return M.QUARANTINED
    return M.DRAINING if drained else M.ONLINE


def transition_machines(machines: QuerySet[Machine], to: str, **fields: Any) -> int:
    """Move every machine of `machines` whose status allows it to `to` (with `fields`) in one
    conditional UPDATE; returns how many moved."""
    return machines.filter(status__in=machine_sources(to)).update(status=to, **fields)


def transition_machine(machine: Machine, to: str, *, only_from: Iterable[str] | None = None, **fields: Any) -> bool:
    """Move `machine` to `to` if the status its row has now allows it (and is one of `only_from`,
    when given). Returns False, changing nothing, when it does not."""
    rows = Machine.objects.filter(pk=machine.pk)
    if only_from is not None:
        rows = rows.filter(status__in=list(only_from))
    if not transition_machines(rows, to, **fields):
        return False
    machine.status = to
    for name, value in fields.items():
        setattr(machine, name, value)
    return True
