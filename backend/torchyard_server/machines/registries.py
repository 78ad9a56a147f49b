"""Hook points through which apps above machines add to what it shows and does, without machines
importing them (pyproject.toml's import contracts). Each is a named registry (core/registry.py); an
app registers its instance in its AppConfig.ready()."""

from __future__ import annotations

from typing import TypedDict

from ..core.registry import Instance, Registry
from .models import Machine


class ProjectUsage(TypedDict):
    """What a project's live nodes take on a machine (never which jobs: every user sees the cluster)."""

    project: str
    gpus: int
    processes: int


class UsageLookup(Instance):
    def usage(self) -> dict[int, list[ProjectUsage]]:
        """{machine id: what live nodes take there, per project}."""
        raise NotImplementedError


usage_lookups: Registry[UsageLookup] = Registry("machine usage lookup", single=True)


def machine_usage() -> dict[int, list[ProjectUsage]]:
    # Without the jobs app nothing runs anywhere.
    lookup = usage_lookups.one_or_none()
    return lookup.usage() if lookup is not None else {}


class MachineRemoval(Instance):
    def removing(self, machine: Machine, *, force: bool) -> None:
        """Called before the machine's row is deleted, inside the removal's transaction. Without
        force it may refuse by raising (services.MachineInUse, a 409); with force it must let go of
        what runs there (the jobs app declares the nodes lost, which stops them and recovers their
        jobs elsewhere, instead of leaving their processes orphaned on a machine nobody knows)."""
        raise NotImplementedError


# Raised, not logged: a refusal must stop the removal.
machine_removals: Registry[MachineRemoval] = Registry("machine removal handlers")


def machine_removing(*, machine: Machine, force: bool) -> None:
    for handler in machine_removals.all():
        handler.removing(machine, force=force)
