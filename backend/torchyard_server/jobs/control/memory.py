"""checkpointing.memory in a node's launch (protocol.MemoryLaunch): the job's key, which its agents ask
of every request; where the node's saves go, its own machine's agent first, then its buddies (the
next machines of the plan, in node-rank order, around the ring); and on a recovery that resumes from
a memory checkpoint, the living machines that hold it, the node's own first."""

from __future__ import annotations

import hashlib
import hmac

from django.conf import settings
from torchyard import protocol

from ...machines.models import Machine
from ..models import Job, JobNode
from ..registries import memory_resume
from ..spec.jobspec import JobSpec
from ..spec.plan import Plan


def memory_key(job_id: int) -> str:
    """The job's key for its memory checkpoints: derived, so every attempt's launches carry the same one."""
    return hmac.new(settings.SECRET_KEY.encode(), f"memory-checkpoints:{job_id}".encode(), hashlib.sha256).hexdigest()


def _holder(machine: Machine) -> protocol.MemoryHolder | None:
    """The machine as a holder, None when its agent runs no memory store (an older agent)."""
    port = machine.capabilities.get("memory_port")
    if not isinstance(port, int) or isinstance(port, bool) or port <= 0:
        return None
    return {"machine": machine.name, "host": machine.host, "port": port,
            "addresses": list(machine.capabilities.get("interfaces") or [])}


def buddies(plan: Plan, node_rank: int, replicas: int) -> list[int]:
    """The machines holding copies of a node's memory checkpoints: the next `replicas` machines of the
    plan after the node's own, around the ring of node ranks (node 1's buddy is node 2's machine, the
    last node's is node 0's), never the node's own machine."""
    ordered = sorted(plan.nodes, key=lambda n: n.node_rank)
    mine = next(i for i, n in enumerate(ordered) if n.node_rank == node_rank)
    own = int(ordered[mine].machine_id)
    found: list[int] = []
    for step in range(1, len(ordered)):
        machine = int(ordered[(mine + step) % len(ordered)].machine_id)
        if machine != own and machine not in found:
            found.append(machine)
        if len(found) == replicas:
            break
    return found


def memory_launch(job: Job, spec: JobSpec, plan: Plan, node: JobNode, resume_uri: str) -> protocol.MemoryLaunch:
    memory = spec.checkpointing.memory
    if memory is None:
        return {}
    wanted = [int(node.machine_id), *buddies(plan, node.node_rank, int(memory.replicas))]
    machines = {m.pk: m for m in Machine.objects.filter(pk__in=wanted)}
    holders = [h for m in wanted if m in machines and (h := _holder(machines[m])) is not None]
    launch: protocol.MemoryLaunch = {"key": memory_key(job.pk), "budget": int(memory.budget),
                                     "every_n_steps": int(memory.every_n_steps), "replicas": int(memory.replicas),
                                     "holders": holders}
    if resume_uri.startswith(protocol.MEMORY_SCHEME):
        found = memory_resume(job_id=job.pk, uri=resume_uri)
        if found is not None:
            manifest, names = found
            living = {m.name: m for m in Machine.objects.filter(name__in=names)}
            own = node.machine_name
            ordered = sorted(names, key=lambda name: name != own)  # this node's own machine's copy first
            launch["resume"] = {"manifest": manifest, "holders": [
                h for name in ordered if name in living and (h := _holder(living[name])) is not None]}
    return launch
