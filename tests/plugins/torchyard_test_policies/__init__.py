"""Placement policies of the tests, installed by their own distribution (tests/plugins/pyproject.toml)
and found by the entry point group `torchyard.placement_policies`, as a site's own would be."""

from __future__ import annotations

from torchyard_server.jobs.placement.policies import PlacementPolicy


class ReverseName(PlacementPolicy):
    """Machines in reverse name order, never one labelled `avoid`; a node gets the highest free GPUs."""

    description = "the tests' policy: machines by name, last first, none labelled avoid"

    def order(self, machines, need):
        return sorted((m for m in machines if "avoid" not in m.labels), key=lambda m: m.name, reverse=True)

    def gpus(self, machine, need):
        return machine.free_gpus(need.min_gpu_memory)[-need.gpus:] if need.gpus else []


class AlwaysFails(PlacementPolicy):
    """A policy with a bug: the planner places by the default policy instead, and says so."""

    def key(self, machine, need):
        raise RuntimeError("a bug in a site's policy")
