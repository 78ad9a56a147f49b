"""Placement policies: in what order the planner tries the machines for a job's nodes, and which
free GPUs of a machine a node gets (DESIGN.md section 14).

A policy only orders. Whether a machine can take a node at all (free GPUs of `min_gpu_memory`,
cores, memory, volumes, labels, versions) is the planner's to decide, the same for every policy,
so a policy can never place a node where it does not fit, and the plan names why each machine was
skipped whatever the policy.

Built in: `pack` and `spread` (Torchyard's), `simple` and `balanced` (the Go scheduler's, as it
defines them). More come from installed distributions, by the entry point group
`torchyard.placement_policies`: the entry point's name is the policy's name in a JobSpec
(`placement.policy`), its object a `PlacementPolicy` subclass (or instance)::

    [project.entry-points."torchyard.placement_policies"]
    fewest-gpus-first = "my_site.scheduling:FewestGpusFirst"
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from importlib.metadata import entry_points
from typing import Any, ClassVar, TypedDict

from django.conf import settings
from django.core import checks

from .candidates import Candidate, Need

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "torchyard.placement_policies"
DEFAULT_POLICY = "pack"


class PlacementPolicy:
    """The interface of every policy, built in or installed. Subclasses give `key` (the simplest:
    machines sorted by it, lowest first), or override `order` for anything a sort key cannot say,
    and may override `gpus`. Both are called with the planner's snapshots (`planner.Candidate`:
    `gpus`, `busy_gpus`, `free_gpus(min_mb)`, `live_nodes`, `busy_procs`, `cpu_count`,
    `cpu_usage`, `labels`, ...) and what one node of the job needs (`planner.Need`: `procs`,
    `gpus`, `min_gpu_memory`, ...). They must not change the snapshots."""

    description: ClassVar[str] = ""

    def key(self, machine: Candidate, need: Need) -> Sequence[Any]:
        raise NotImplementedError(f"{type(self).__name__} gives neither key() nor order()")

    def order(self, machines: list[Candidate], need: Need) -> list[Candidate]:
        """The machines to try, best first; the name breaks ties, so a plan is the same every time.
        A machine left out of the list is not planned on ("left out by placement policy ...")."""
        return sorted(machines, key=lambda m: (tuple(self.key(m, need)), m.name))

    def gpus(self, machine: Candidate, need: Need) -> list[int]:
        """Which of the machine's free GPUs (of `need.min_gpu_memory` or more) a node gets:
        `need.gpus` of them, by default the lowest indices."""
        return machine.free_gpus(need.min_gpu_memory)[:need.gpus]


def _free_cores(machine: Candidate) -> int:
    return max(machine.cpu_count - machine.busy_procs, 0)


def _memory_of(machine: Candidate) -> dict[int, int]:
    return {int(g["index"]): int(g.get("memory_mb") or 0) for g in machine.gpus}


class Pack(PlacementPolicy):
    description = "least waste: the machines a node fits most tightly first (fewest free GPUs, or free cores "\
                  "for a CPU job, left after placing)"

    def key(self, machine: Candidate, need: Need) -> Sequence[Any]:
        if need.gpus:
            return (len(machine.free_gpus(need.min_gpu_memory)) - need.gpus,)
        return (_free_cores(machine) - need.procs,)


class Spread(PlacementPolicy):
    description = "the least loaded first: fewest live nodes, then the lowest CPU usage"

    def key(self, machine: Candidate, need: Need) -> Sequence[Any]:
        return (machine.live_nodes, machine.cpu_usage)


class Simple(PlacementPolicy):
    """The Go scheduler's simple policy: GPU availability and memory requirements, for the least resource
    waste. First the machine left with the fewest free GPUs (of `min_gpu_memory` or more) after
    placing the node; among those, the least GPU memory beyond what the node asks (its free GPUs'
    memory less `gpus x min_gpu_memory`: a 20 GB node wastes 60 GB of an 80 GB GPU). The node gets
    the smallest GPUs that are big enough. A CPU job goes where the fewest GPUs are free (the GPU
    machines stay for GPU jobs), then where the fewest cores are left."""

    description = "the Go scheduler's least resource waste: fewest free GPUs (of at least min_gpu_memory) left after "\
                  "placing, then least GPU memory beyond the asked; the smallest GPUs that are big enough"

    def key(self, machine: Candidate, need: Need) -> Sequence[Any]:
        free_memory = sum(mb for index, mb in _memory_of(machine).items() if index not in machine.busy_gpus)
        return (len(machine.free_gpus(need.min_gpu_memory)) - need.gpus, free_memory - need.gpus * need.min_gpu_memory,
                _free_cores(machine) - need.procs)

    def gpus(self, machine: Candidate, need: Need) -> list[int]:
        memory = _memory_of(machine)
        return sorted(machine.free_gpus(need.min_gpu_memory), key=lambda i: (memory[i], i))[:need.gpus]


class Balanced(PlacementPolicy):
    """The Go scheduler's balanced policy: the load spread by active tasks and available GPUs. Its score,
    lowest first, is (active tasks - free GPUs) / GPUs, with the live nodes on the machine as its
    active tasks and its GPUs of `min_gpu_memory` or more that no node holds as the free ones; ties
    go to the fewest tasks, then the most free GPUs. A machine without GPUs counts its cores as
    its slots, so CPU jobs are balanced the same way."""

    description = "the Go scheduler's balanced load: fewest active tasks and most free GPUs, scored "\
                  "(tasks - free GPUs) / GPUs"

    def key(self, machine: Candidate, need: Need) -> Sequence[Any]:
        if machine.gpus:
            slots, free = len(machine.gpus), len(machine.free_gpus(need.min_gpu_memory))
        else:
            slots, free = machine.cpu_count, _free_cores(machine)
        score = (machine.live_nodes - free) / slots if slots else float(machine.live_nodes)
        return (score, machine.live_nodes, -free)


BUILT_IN: dict[str, PlacementPolicy] = {"pack": Pack(), "spread": Spread(), "simple": Simple(), "balanced": Balanced()}


@functools.cache
def installed() -> dict[str, PlacementPolicy]:
    """Every policy by name: the built-in ones, then those of the installed distributions' entry
    points (read once per process: a newly installed policy needs the server restarted). One that
    fails to load is left out with a logged error, so a broken plugin never stops scheduling."""
    found: dict[str, PlacementPolicy] = dict(BUILT_IN)
    for entry in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        if entry.name in found:
            log.error("placement policy %s from %s ignored: the name is taken", entry.name, entry.value)
            continue
        try:
            loaded = entry.load()
            policy = loaded() if isinstance(loaded, type) else loaded
        except Exception:
            log.exception("placement policy %s (%s) could not be loaded", entry.name, entry.value)
            continue
        if not isinstance(policy, PlacementPolicy):
            log.error("placement policy %s (%s) ignored: not a torchyard_server.jobs.placement.policies.PlacementPolicy",
                      entry.name, entry.value)
            continue
        found[entry.name] = policy
    return found


def default_policy() -> str:
    """The policy of a job that names none: `pack`, or the server's (the Go scheduler's server takes one
    for every task: `torchyard-server run --policy balanced`, TORCHYARD_PLACEMENT_POLICY)."""
    return settings.PLACEMENT_POLICY


def default_policy_check(**kwargs: Any) -> list[checks.CheckMessage]:
    """A server whose default policy is not installed would refuse every job that names none."""
    if settings.PLACEMENT_POLICY in policy_names():
        return []
    return [checks.Error(f"TORCHYARD_PLACEMENT_POLICY={settings.PLACEMENT_POLICY!r} is not a placement policy "
                         f"of this server; choose one of: {', '.join(policy_names())}", id="torchyard.E001")]


def policy_names() -> list[str]:
    """What `placement.policy` accepts: the built-in names first, then the installed ones."""
    return [*BUILT_IN, *sorted(set(installed()) - set(BUILT_IN))]


class PolicyListed(TypedDict):
    """A placement policy as GET /api/placement-policies lists it (PlacementPolicyOut)."""

    name: str
    description: str
    built_in: bool


def policy_catalog() -> list[PolicyListed]:
    return [{"name": name, "description": policy.description or (type(policy).__doc__ or "").strip().split("\n")[0],
             "built_in": name in BUILT_IN} for name, policy in installed().items()]


def resolve(name: str) -> tuple[PlacementPolicy, str]:
    """The policy of that name, and a warning when there is none (a job queued with a policy that
    has since been uninstalled): it is then placed by the default policy rather than never."""
    policy = installed().get(name)
    if policy is not None:
        return policy, ""
    return BUILT_IN[DEFAULT_POLICY], f"placement policy {name} is not installed on this server: placed by {DEFAULT_POLICY}"


def ordered(name: str, machines: list[Candidate], need: Need) -> tuple[list[Candidate], list[str]]:
    """The machines in the order of policy `name`, and warnings for the plan. An installed policy
    that raises or answers machines it was not given falls back to the default's order."""
    policy, warning = resolve(name)
    warnings = [warning] if warning else []
    try:
        answer = list(policy.order(list(machines), need))
    except Exception as exc:
        if name in BUILT_IN:
            raise
        log.exception("placement policy %s failed", name)
        answer, warnings = None, [*warnings, f"placement policy {name} failed ({type(exc).__name__}): placed by "
                                             f"{DEFAULT_POLICY}"]
    given = {id(m) for m in machines}
    if answer is not None and (any(id(m) not in given for m in answer) or len({id(m) for m in answer}) < len(answer)):
        warnings.append(f"placement policy {name} answered machines it was not given: placed by {DEFAULT_POLICY}")
        answer = None
    if answer is None:
        answer = BUILT_IN[DEFAULT_POLICY].order(list(machines), need)
    return answer, warnings


def chosen_gpus(name: str, machine: Candidate, need: Need) -> list[int]:
    """The GPUs policy `name` gives one node on `machine`: `need.gpus` distinct free ones big enough,
    or else the default's (lowest indices): a policy cannot hand out a GPU that is held or too small."""
    if not need.gpus:
        return []
    policy, _ = resolve(name)
    free = machine.free_gpus(need.min_gpu_memory)
    try:
        picked = [int(i) for i in policy.gpus(machine, need)]
    except Exception:
        if name in BUILT_IN:
            raise
        log.exception("placement policy %s failed to choose GPUs", name)
        picked = []
    if len(picked) == need.gpus and len(set(picked)) == need.gpus and set(picked) <= set(free):
        return picked
    return free[:need.gpus]
