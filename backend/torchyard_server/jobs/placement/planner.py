"""Where every rank goes. Pure functions over snapshots of the machines, so the dry run
(`POST /api/jobs/plan`) and the real dispatch share one piece of logic and tests need no cluster."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypedDict

from torchyard.sdk.scaling import adjust_hyperparameters

from ..spec.jobspec import JobSpec
from ..spec.plan import Plan, PlanNode, PlanSpare, PlanVolume
from . import policies
from .candidates import Candidate, Need, PlanError, bytes_text, volume_size


def _never(machine: Candidate, need: Need) -> str | None:
    """Why the machine could never take a node of the job, busy or not (beyond GPUs and volumes)."""
    if need.python and machine.python_version and ".".join(machine.python_version.split(".")[:2]) != need.python:
        return f"Python {machine.python_version}, the function was pickled on {need.python}"
    for key, value in need.labels:
        if str(machine.labels.get(key)) != value:
            return f"label {key}={value} asked, the machine has " + (
                f"{key}={machine.labels[key]}" if key in machine.labels else f"no label {key}")
    if need.cpus and machine.cpu_count and machine.cpu_count < need.cpus:
        return f"{plural(machine.cpu_count, 'core')}, {need.cpus} asked"
    if need.memory and machine.memory_total and machine.memory_total < need.memory:
        return f"{bytes_text(machine.memory_total)} of memory, {_memory_asked(need)}"
    return None


def _memory_asked(need: Need) -> str:
    """ "8.0 GiB asked", with memory checkpoints "8.0 GiB asked (4.0 GiB of them the memory checkpoints' budget)"."""
    if not need.memory_checkpoints:
        return f"{bytes_text(need.memory)} asked"
    return (f"{bytes_text(need.memory)} asked ({bytes_text(need.memory_checkpoints)} of them the memory "
            "checkpoints' budget)")


def _fits(machine: Candidate, need: Need) -> bool:
    """Free GPUs for a GPU job; for a CPU job, cores: a machine that already runs processes takes
    more only while its cores last (a 2-core machine is not given three 4-process jobs), unless the
    job allows oversubscription. An idle machine takes any one node (the plan warns)."""
    if need.memory and machine.memory_total and machine.memory_free < need.memory:
        return False
    if need.gpus:
        return len(machine.free_gpus(need.min_gpu_memory)) >= need.gpus
    if need.oversubscribe or machine.busy_procs == 0 or not machine.cpu_count:
        return True
    return machine.busy_procs + max(need.procs, need.cpus) <= machine.cpu_count


def plural(count: int, word: str) -> str:
    """ "1 node", "2 nodes", "2 processes": the queue's and the quotas' reasons say it the same way."""
    return f"{count} {word}{'' if count == 1 else ('es' if word.endswith('s') else 's')}"


def _memory(mb: int) -> str:
    """A GPU memory size as a user would write it: 40000 and 40960 MB are both "40 GB"."""
    for unit in (1024, 1000):
        if mb >= unit and mb % unit == 0:
            return f"{mb // unit} GB"
    return f"{mb} MB"


def why_not(machine: Candidate, need: Need) -> str | None:
    """Why a node of the job cannot go to this machine now, in a few words; None when it can."""
    if not machine.schedulable:
        if machine.suspect:
            return "suspect"
        if machine.status == "quarantined":
            return f"quarantined: {machine.quarantine_reason}" if machine.quarantine_reason else "quarantined"
        return machine.status  # offline, draining, pending
    lacking = machine.lacks_volume(need.volumes, need.volume_sizes, need.volume_classes) or _never(machine, need)
    if lacking:
        return lacking
    if need.memory and machine.memory_total and machine.memory_free < need.memory:
        return f"{bytes_text(machine.memory_free)} of memory free, {_memory_asked(need)}"
    if need.gpus:
        slots = machine.gpu_slots(need.min_gpu_memory)
        if len(machine.gpus) < need.gpus:
            return f"{plural(len(machine.gpus), 'GPU')}, {need.gpus} asked"
        if slots == 0:
            return f"less than {_memory(need.min_gpu_memory)} per GPU"
        if slots < need.gpus:
            return f"{plural(slots, 'GPU')} of {_memory(need.min_gpu_memory)} or more, {need.gpus} asked"
    if not _fits(machine, need):
        if need.gpus:
            return f"{plural(len(machine.free_gpus(need.min_gpu_memory)), 'GPU')} free, {need.gpus} asked"
        return f"busy: {machine.busy_procs} processes of {machine.cpu_count} cores, {need.procs} more asked"
    return None


def _skipped(machines: list[Candidate], reasons: dict[int, str]) -> list[dict[str, Any]]:
    """Every machine not chosen, with why, by name."""
    return [{"machine_id": m.id, "machine_name": m.name, "reason": reasons[m.id]}
            for m in sorted(machines, key=lambda m: m.name) if m.id in reasons]


def order_machines(machines: list[Candidate], policy: str, need: Need | None = None) -> list[Candidate]:
    """The machines in the order of placement policy `policy` (jobs/placement/policies.py: pack, spread,
    simple, balanced or an installed one). A suspect machine is not schedulable: why_not skips it."""
    return policies.ordered(policy, machines, need or Need(procs=1))[0]


def _shapes(spec: JobSpec, online: int) -> list[tuple[int, Need]]:
    """(nodes, what each node needs), in order of preference. DistroML's `workers` is a world size
    of processes with `gpus_per_worker` GPUs each, spread over as many machines as can hold them;
    torchrun's static ranks need the same process count on every node, so node counts divide it."""
    resources = spec.resources
    oversubscribe = bool(spec.placement.oversubscribe)
    min_memory = resources.min_gpu_memory
    if resources.workers is None:
        # An elastic range (min_nodes..nodes): every count from the most down, one node's need for all.
        need = Need(int(resources.procs_per_node or 1), resources.gpus_per_node, min_memory, oversubscribe)
        return [(nodes, need) for nodes in range(resources.most_nodes, resources.fewest_nodes - 1, -1)]
    workers, per_worker = resources.workers, resources.gpus_per_worker or 0
    if spec.distributed.launcher in ("none", "ray"):
        # One plain process per node: the world is spread one worker to a machine, or not at all.
        return [(workers, Need(1, per_worker, min_memory, oversubscribe))]
    return [
        (nodes, Need(workers // nodes, workers // nodes * per_worker, min_memory, oversubscribe))
        for nodes in range(min(workers, max(online, 1)), 0, -1)
        if workers % nodes == 0
    ]


def _could_hold(machine: Candidate, need: Need) -> bool:
    """Whether the machine could ever take a node, busy or not: online, GPUs enough, every volume."""
    return (machine.schedulable and machine.gpu_slots(need.min_gpu_memory) >= need.gpus
            and machine.lacks_volume(need.volumes, need.volume_sizes, need.volume_classes) is None
            and _never(machine, need) is None)


def _volume_asks(need: Need) -> str:
    """The job's volumes as a refusal names them: "shared-data (1.0 TiB free, storage class juicefs-sc)"."""
    sizes, classes = dict(need.volume_sizes), dict(need.volume_classes)
    named = []
    for name in need.volumes:
        asks = ([f"{volume_size(sizes[name])} free"] if name in sizes else []) + (
            [f"storage class {classes[name]}"] if name in classes else [])
        named.append(f"{name} ({', '.join(asks)})" if asks else name)
    return ", ".join(named)


def _holders(machines: list[Candidate], need: Need) -> int:
    return sum(1 for m in machines if _could_hold(m, need))


class NodeAsks(TypedDict):
    """What every node asks of its machine beyond processes and GPUs: Need's other fields."""

    volumes: tuple[str, ...]
    volume_sizes: tuple[tuple[str, int], ...]
    volume_classes: tuple[tuple[str, str], ...]
    cpus: int
    memory: int
    memory_checkpoints: int
    labels: tuple[tuple[str, str], ...]
    python: str


def _memory_budget(spec: JobSpec) -> int:
    memory = spec.checkpointing.memory
    return int(memory.budget) if memory is not None else 0


def _asks(spec: JobSpec) -> NodeAsks:
    return {"volumes": spec.volume_names,
            "volume_sizes": tuple((v.name, int(v.size)) for v in spec.volumes or [] if v.size),
            "volume_classes": tuple((v.name, str(v.storage_class)) for v in spec.volumes or [] if v.storage_class),
            "cpus": int(spec.resources.cpus_per_node or 0),
            # The memory checkpoints a machine holds for the job (its own node's and its buddies') come
            # out of the same free memory as the node's processes.
            "memory": int(spec.resources.memory_per_node or 0) + _memory_budget(spec),
            "memory_checkpoints": _memory_budget(spec),
            "labels": tuple(sorted((str(k), str(v)) for k, v in (spec.placement.labels or {}).items())),
            "python": str(spec.function.python if spec.function else "")}


def plan_job(
    spec: JobSpec,
    machines: list[Candidate],
    *,
    pick_port: Callable[[Candidate], int],
) -> Plan:
    """The execution plan for `spec` on `machines`, or PlanError saying what is missing. Either
    names, for every machine it did not choose, why (`skipped`): "offline", "draining", "2 GPUs
    free, 4 asked", "less than 40 GB per GPU", "busy: 3 processes of 4", "versions differ" ..."""
    placement = spec.placement
    manual: list[Candidate] | None = None
    reasons: dict[int, str] = {}
    if placement.machines:
        by_key = {m.name: m for m in machines} | {str(m.id): m for m in machines}
        missing = [key for key in placement.machines if key not in by_key]
        if missing:
            raise PlanError(f"unknown machines in placement: {', '.join(missing)}", kind="invalid")
        manual = [by_key[key] for key in placement.machines]
        listed = {m.id for m in manual}
        reasons = {m.id: "not in the job's placement" for m in machines if m.id not in listed}
    candidates = manual if manual is not None else machines
    asks = _asks(spec)
    shapes = [(n, replace(d, **asks)) for n, d in _shapes(spec, len([m for m in candidates if m.schedulable]))]
    # The first shape the online machines could ever hold; then whether they can hold it now.
    nodes, need = next(((n, d) for n, d in shapes if _holders(candidates, d) >= n), shapes[-1])
    # Manual placement keeps the user's order (the first is the master); otherwise the policy's.
    policy_warnings: list[str] = []
    if manual is not None:
        pool = manual
    else:
        pool, policy_warnings = policies.ordered(placement.policy, machines, need)
        kept = {m.id for m in pool}
        reasons |= {m.id: f"left out by placement policy {placement.policy}" for m in machines if m.id not in kept}
    for machine in pool:
        reason = why_not(machine, need)
        if reason is not None:
            reasons[machine.id] = reason

    elastic, fewest = spec.is_elastic, spec.resources.fewest_nodes
    at_least = "at least " if elastic else ""

    def refuse(message: str, kind: str) -> PlanError:
        fine = f"fits, but the job needs {at_least}{plural(nodes, 'such machine')}"
        return PlanError(message, kind=kind, skipped=_skipped(machines, {m.id: fine for m in pool} | reasons))

    online = [m for m in pool if m.schedulable]
    could_hold = [m for m in online if _could_hold(m, need)]
    if len(could_hold) < nodes:
        wanted = f"{at_least}{nodes} online machines" + (
            f" with {need.gpus} GPUs of >= {need.min_gpu_memory} MB" if need.gpus else "") + (
            f" with volume{'s' if len(need.volumes) > 1 else ''} {_volume_asks(need)}" if need.volumes else "")
        # Named with their status: a queued job waiting on a quarantined machine says so.
        down = [f"{m.name} {m.status}" for m in pool if not m.schedulable]
        raise refuse(
            f"needs {wanted}; {len(could_hold)} online machine(s) can hold a node"
            + (f" ({', '.join(down)})" if down else ""),
            "capacity",
        )
    # Only machines that could ever hold a node (volumes, labels ...): _fits looks at what is free.
    ready = [m for m in could_hold if _fits(m, need)]
    if elastic:
        # As many nodes as fit now, up to the most; never fewer than the least (refused below).
        nodes = max(fewest, min(nodes, len(ready)))
    if len(ready) < nodes:
        what = "free GPUs" if need.gpus else f"room for {need.procs} more process{'' if need.procs == 1 else 'es'}"
        # A queued job shows this as its reason: say what holds the busy machines back.
        busy = [f"{m.name}: {reasons[m.id]}" for m in online if m.id in reasons][:5]
        raise refuse(f"waiting for {at_least}{nodes} machines with {what}: {len(ready)} now"
                     + (f" ({'; '.join(busy)})" if busy else ""), "busy")

    try:
        chosen = _agreeing(ready, nodes, manual=manual is not None, least=fewest if elastic else nodes)
        nodes = len(chosen)
    except PlanError as exc:
        for machine in ready:
            reasons.setdefault(machine.id, f"versions differ: {machine.describe_versions()}")
        raise refuse(exc.reason, exc.kind) from None
    taken = {m.id for m in chosen}
    for machine in ready:
        if machine.id not in taken:
            reasons[machine.id] = (f"versions differ: {machine.describe_versions()}" if not _agrees(machine, chosen)
                                   else f"not needed: the job's {plural(nodes, 'node')} went to machines before it")
    spares = _spares(spec, ready, chosen, could_hold, refuse)
    for machine in spares:
        reasons[machine.id] = "held as a hot spare of the job"
    procs, gpus_per_node = need.procs, need.gpus
    world_size = nodes * procs
    backend = spec.distributed.backend
    if backend == "auto":
        backend = "nccl" if gpus_per_node > 0 else "gloo"
    warnings = policy_warnings + [
        f"{m.name} has {m.cpu_count} CPUs for {procs} processes"
        for m in chosen if m.cpu_count and procs > m.cpu_count and gpus_per_node == 0
    ]
    port = pick_port(chosen[0])
    plan_nodes = [
        PlanNode(
            node_rank=node_rank, machine_id=machine.id, machine_name=machine.name, host=machine.host, nproc=procs,
            rank_start=node_rank * procs, rank_end=node_rank * procs + procs - 1,
            # Which free GPUs: the policy's choice (simple: the smallest that are big enough).
            gpus=policies.chosen_gpus(placement.policy, machine, need),
            # Each volume as this machine has it: the node's launch carries its own path.
            volumes=[PlanVolume(name=v.name, path=machine.volumes[v.name]["path"], mount_path=v.mount_path or v.name,
                                access_mode=v.access_mode or "ReadWriteMany") for v in spec.volumes]
            if spec.volumes else None,
        )
        for node_rank, machine in enumerate(chosen)
    ]
    return Plan(
        world_size=world_size,
        nnodes=nodes,
        procs_per_node=procs,
        master_addr=chosen[0].host,
        master_port=port,
        backend=backend,
        launcher=spec.distributed.launcher,
        nodes=plan_nodes,
        # resources.spares: machines held for the job, warmed with its code, each taking the place of a
        # lost one (control/recovery.py job_recover).
        spares=[_spare(m, placement.policy, need) for m in spares],
        hyperparameters=adjust_hyperparameters(spec.hyperparameters, spec.scaling.to_json(), world_size),
        # An elastic job's range [MIN, MAX]: it starts with `nnodes` of them (the world size above).
        nodes_range=[fewest, spec.resources.most_nodes] if elastic else None,
        warnings=warnings,
        skipped=_skipped(machines, reasons),
        # What the nodes' preflight will check before any rank starts (the job's preflight events
        # say how it went): every node reaches the master's address and port, and the versions agree.
        preflight=_preflight(chosen[0].host, port, chosen),
    )


def _spare(machine: Candidate, policy: str, need: Need) -> PlanSpare:
    return PlanSpare(machine_id=machine.id, machine_name=machine.name, host=machine.host,
                     gpus=policies.chosen_gpus(policy, machine, need))


def _preflight(master: str, port: int, chosen: list[Candidate]) -> dict[str, Any]:
    return {"master": f"{master}:{port}", "versions": {m.name: m.describe_versions() for m in chosen}}


def _spares(spec: JobSpec, ready: list[Candidate], chosen: list[Candidate], could_hold: list[Candidate],
            refuse: Callable[[str, str], PlanError]) -> list[Candidate]:
    """resources.spares machines beside the chosen ones, as ready as they are and agreeing with them (a
    spare replaces a node as it is). Short of them the job waits like for nodes."""
    wanted = int(spec.resources.spares or 0)
    if not wanted:
        return []
    taken = {m.id for m in chosen}
    spares = [m for m in ready if m.id not in taken and _agrees(m, chosen)][:wanted]
    if len(spares) < wanted:
        kind = "capacity" if len(could_hold) < len(chosen) + wanted else "busy"
        raise refuse(f"needs {plural(wanted, 'hot spare')} beside its {plural(len(chosen), 'node')}: "
                     f"{len(spares)} more machine(s) {'can hold' if kind == 'capacity' else 'free to hold'} a node now", kind)
    return spares


def _agrees(machine: Candidate, chosen: list[Candidate]) -> bool:
    """Whether this machine's versions agree with every chosen machine's (unknown agrees with all)."""
    return machine.versions == ("", "") or all(m.versions in (machine.versions, ("", "")) for m in chosen)


def _agreeing(ready: list[Candidate], nodes: int, *, manual: bool, least: int | None = None) -> list[Candidate]:
    """The first `nodes` ready machines (in policy order) whose training Pythons agree with each
    other, so no node's preflight has to refuse the job at launch. A machine whose agent does not
    report versions goes with any. An elastic job takes the largest agreeing group of at least
    `least` machines (up to `nodes`)."""
    groups: dict[tuple[str, str], list[Candidate]] = {}
    for machine in ready:
        if machine.versions != ("", ""):
            groups.setdefault(machine.versions, [])
    for key, members in (groups.items() if groups else [(("", ""), [])]):
        members.extend(m for m in ready if m.versions in (key, ("", "")))
    largest = max(groups.values() if groups else [list(ready)], key=len)
    for members in (groups.values() if groups else [largest]):
        if len(members) >= nodes:
            return members[:nodes]
    if least is not None and len(largest) >= least:
        return largest[:nodes]
    found = ", ".join(f"{m.name} {m.describe_versions()}" for m in ready)
    raise PlanError(f"needs {nodes} machines with the same torch and Python (minor) version; {found}",
                    kind="invalid" if manual else "capacity")


def plan_in_place(spec: JobSpec, previous: Plan, machines: list[Candidate], *,
                  pick_port: Callable[[Candidate], int]) -> tuple[Plan, str] | None:
    """The next attempt's plan without re-planning (recovery in place): every node stays on its
    machine with its GPUs, except that a node whose machine is gone (offline, suspect, quarantined,
    taken by another job since, or one the previous plan leaves: a straggler replaced) is given one of the job's hot spares (resources.spares) as it is, the rest
    untouched. None when that cannot be (an elastic job, a volume to re-place, no spare left): the
    caller plans anew. Returns the plan and what it did, in words."""
    if not previous.nodes or spec.is_elastic:
        return None
    leaving = {int(machine_id): why for machine_id, why in (previous.leaving or {}).items()}
    by_id = {m.id: m for m in machines}
    need = Need(int(previous.procs_per_node), 0, 0, bool(spec.placement.oversubscribe))

    def usable(machine_id: int, gpus: list[int]) -> Candidate | None:
        machine = by_id.get(machine_id) if machine_id not in leaving else None
        if machine is None or not machine.schedulable or machine.suspect:
            return None
        if gpus:
            return None if set(gpus) & machine.busy_gpus else machine
        return machine if _fits(machine, need) else None

    spares = [s for s in previous.spares or [] if usable(s.machine_id, s.gpus)]
    nodes: list[PlanNode] = []
    replaced: list[str] = []
    for node in sorted(previous.nodes, key=lambda n: n.node_rank):
        if usable(node.machine_id, node.gpus):
            nodes.append(node)
            continue
        if not spares or node.volumes:
            return None
        spare = spares.pop(0)
        nodes.append(replace(node, machine_id=spare.machine_id, machine_name=spare.machine_name, host=spare.host,
                             gpus=list(spare.gpus)))
        machine = by_id.get(node.machine_id)
        gone = ("removed" if machine is None else "lost" if machine.suspect else "taken by another job"
                if machine.schedulable else "quarantined" if machine.status == "quarantined" else machine.status)
        why = leaving.get(node.machine_id, gone)
        replaced.append(f"hot spare {spare.machine_name} takes node {node.node_rank}'s place "
                        f"({node.machine_name} {why})")
    master = by_id[nodes[0].machine_id]
    port = pick_port(master)
    plan = replace(previous, nodes=nodes, spares=spares, master_addr=master.host, master_port=port, leaving=None,
                   preflight=_preflight(master.host, port, [by_id[n.machine_id] for n in nodes]),
                   warnings=[*previous.warnings, *replaced])
    return plan, ("; ".join(replaced) if replaced else "in place on the same machines")


def replacement_spares(spec: JobSpec, plan: Plan, machines: list[Candidate]) -> list[PlanSpare]:
    """Hot spares to hold again for a running job that used some (a spare took a lost node's place):
    free machines, in policy order, that could take one of its nodes as they are now (as `_spares`
    picks them: not the job's, agreeing with its nodes' versions, never a suspect one). As many as
    it lacks of resources.spares, fewer when fewer fit; [] when it lacks none."""
    wanted = int(spec.resources.spares or 0) - len(plan.spares or [])
    if wanted <= 0 or not plan.nodes:
        return []
    policy, first = spec.placement.policy, plan.nodes[0]
    need = Need(int(plan.procs_per_node), len(first.gpus), int(spec.resources.min_gpu_memory or 0),
                bool(spec.placement.oversubscribe), **_asks(spec))
    by_id = {m.id: m for m in machines}
    taken = plan.held_machine_ids
    nodes = [by_id[m] for m in taken if m in by_id]
    ordered, _ = policies.ordered(policy, machines, need)
    fit = [m for m in ordered if m.id not in taken and _could_hold(m, need) and _fits(m, need) and not m.suspect
           and _agrees(m, nodes)]
    return [_spare(m, policy, need) for m in fit[:wanted]]
