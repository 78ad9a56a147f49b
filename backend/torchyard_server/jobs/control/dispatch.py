"""Planning a job against the machines as they are and launching its attempt's nodes."""

from __future__ import annotations

import dataclasses

from django.db import transaction
from django.db.models import Max
from torchyard import protocol

from ...celery import app as celery_app
from ...machines.models import Machine
from ...projects.priorities import priority_label
from ..models import Job, JobNode
from ..placement.candidates import PlanError, machine_candidates
from ..placement.planner import plan_in_place, plan_job
from ..queue_poke import queue_poke_on_commit
from ..registries import resume_manifest_uri
from ..selectors import waiting_ahead_of
from ..spec import secretbox
from ..spec.jobspec import JobSpec
from ..spec.plan import Plan
from ..spec.progress import JobProgress
from ..states import transition_job, transition_node
from .grants import bundle_grant
from .launch import code_payload, launch_payload, open_secrets
from .lock import placement_lock
from .nodes import live_nodes
from .ports import pick_master_port

J, N = Job.Status, JobNode.Status


def job_preview_plan(*, spec: JobSpec) -> Plan:
    """The plan this spec would get now; raises PlanError. Launches nothing."""
    return plan_job(spec, machine_candidates(), pick_port=pick_master_port)


def plan_and_dispatch(*, job_id: int, from_status: str, prefix: str = "") -> None:
    """Plan against the machines as they are and create the attempt's nodes in one transaction,
    under the placement lock: two jobs planned at once by two controller threads can never be given
    the same GPU or the same cores. Locks: placement, then the job, then its nodes."""
    with transaction.atomic():
        placement_lock()
        job = Job.objects.select_for_update().filter(pk=job_id).first()
        if job is None or job.status != from_status or live_nodes(job):
            return
        spec = JobSpec.from_json(job.spec)
        try:
            placed = _recovery_plan(job, spec) if from_status == J.RECOVERING else (job_preview_plan(spec=spec), "")
            if placed is None:
                transition_job(job, J.QUEUED, prefix + _waits_its_turn(waiting_ahead_of(job)))
                return
            open_secrets(spec)
        except PlanError as exc:
            transition_job(job, J.FAILED if exc.kind == "invalid" else J.QUEUED, prefix + exc.reason)
            return
        except secretbox.SecretUnreadable as exc:
            # Nothing will open them later either: fail now rather than leave the job half-dispatched.
            transition_job(job, J.FAILED, prefix + str(exc))
            return
        plan = placed[0]
        dispatch(job, plan, how=placed[1])
        if len(plan.spares or []) < int(spec.resources.spares or 0):
            queue_poke_on_commit()  # a hot spare was used: the pass holds another when one is free


def _recovery_plan(job: Job, spec: JobSpec) -> tuple[Plan, str] | None:
    """Where a recovering job relaunches and how, in words; None: it waits its turn in the queue.
    In place on its machines, or with a lost node onto its own hot spare (plan_in_place), or an
    elastic job shrunk onto the machines it had, it takes nothing from anyone: at once. Needing
    other machines, it takes them at once only when no waiting job comes before it in the queue's
    order (priority, then submission); otherwise it waits in the queue with them, as a preempted job
    does, and a pass starts it in its turn. Raises PlanError."""
    own = machine_candidates(exclude_job=job.pk)
    previous = Plan.from_json(job.plan)
    in_place = plan_in_place(spec, previous, own, pick_port=pick_master_port)
    if in_place is not None:
        return in_place
    if not waiting_ahead_of(job):
        return job_preview_plan(spec=spec), ""
    held = previous.held_machine_ids
    try:
        return plan_job(spec, [m for m in own if m.id in held], pick_port=pick_master_port), \
            "re-planned on the machines it held"
    except PlanError:  # of any kind: other machines might do, in its turn
        return None


def _waits_its_turn(ahead: list[tuple[int, int]]) -> str:
    """A recovery that needs machines other than its own, behind waiting jobs: where it waits."""
    first, priority = ahead[0]
    others = f" and {len(ahead) - 1} more" if len(ahead) > 1 else ""
    return (f"its machines cannot take it back, and #{first} (priority {priority_label(priority)}){others} "
            f"{'wait' if others else 'waits'} ahead of it in the queue: it waits its turn for other machines")


def _next_attempt(job: Job) -> int:
    """0 for a first launch; one more than the last attempt that launched anything otherwise."""
    last = job.nodes.aggregate(last=Max("attempt"))["last"]
    return 0 if last is None else last + 1


def dispatch(job: Job, plan: Plan, how: str = "", *, after_preemption: bool = False) -> None:
    """Create the attempt's nodes and send their launches on commit (the caller holds the locks);
    `how` says how a recovery was placed (in place, onto a spare). `after_preemption`: the attempt
    resumes a preempted job, which the queue then leaves running for PREEMPTION_MIN_RUN seconds
    (the plan says so: it is the attempt's)."""
    spec = JobSpec.from_json(job.spec)
    plan = dataclasses.replace(plan, after_preemption=True if after_preemption else None)
    attempt = _next_attempt(job)
    machines = {m.pk: m for m in Machine.objects.filter(pk__in=[n.machine_id for n in plan.nodes])}
    nodes = [
        JobNode.objects.create(
            job=job, attempt=attempt, machine=machines[n.machine_id], machine_name=n.machine_name,
            host=n.host, node_rank=n.node_rank, nproc=n.nproc, rank_start=n.rank_start,
            rank_end=n.rank_end, gpus=n.gpus,
        )
        for n in plan.nodes
    ]
    resume = resume_manifest_uri(job_id=job.pk) if attempt > 0 else ""
    what = f"launching {len(nodes)} node(s), world size {plan.world_size}"
    resized = _resized(job, attempt, plan) if attempt > 0 and spec.is_elastic else ""
    if resized:
        what = f"{resized}; {what}"
    if how:
        what = f"{how}; {what}"
    if attempt > 0:
        what += f", attempt {attempt}, " + (f"resuming from {resume}" if resume else "from scratch (no checkpoint yet)")
    transition_job(
        job, J.DISPATCHING, what,
        plan=plan.to_json(), world_size=plan.world_size, master_addr=plan.master_addr,
        master_port=plan.master_port, attempt=attempt,
        # A new attempt may have other ranks: throughput and the ranks' steps restart from its own reports.
        progress=JobProgress.from_json(job.progress).for_new_attempt().to_json(),
    )
    warm_spares(spec, plan)
    for node in nodes:
        transition_node(node, N.LAUNCHING, f"sent to {node.machine_name}")
        launch = launch_payload(job, spec, plan, node, resume)
        machine_id = node.machine_id
        transaction.on_commit(
            lambda launch=launch, machine_id=machine_id: celery_app.send_task(
                protocol.TASK_LAUNCH_NODE, kwargs={"launch": launch}, queue=protocol.machine_queue(machine_id)
            )
        )


def warm_spares(spec: JobSpec, plan: Plan) -> None:
    """Each hot spare prepares the job's code and environment into its machine's cache, and a warm
    pool of that environment's Python, as a node of the job would: taking a lost node's place then
    costs what a recovery in place does."""
    code, pip = code_payload(spec), list(spec.runtime.pip)
    for spare in plan.spares or []:
        machine_id = int(spare.machine_id)
        granted = {**code, "grant": bundle_grant(sha256=code["bundle"], machine_id=machine_id)} if code else {}
        transaction.on_commit(lambda granted=granted, machine_id=machine_id: celery_app.send_task(
            protocol.TASK_WARM_CACHES, kwargs={"code": granted, "pip": pip, "pool": True},
            queue=protocol.machine_queue(machine_id)))


def _resized(job: Job, attempt: int, plan: Plan) -> str:
    """An elastic job's new attempt next to its last one: "shrunk from 3 to 2 nodes: machine m3 lost",
    "grown from 2 to 3 nodes", or "" for the same count."""
    before = list(job.nodes.filter(attempt=attempt - 1).select_related("machine").order_by("node_rank"))
    if not before or len(before) == len(plan.nodes):
        return ""
    if len(plan.nodes) > len(before):
        return f"grown from {len(before)} to {len(plan.nodes)} nodes"
    kept = {n.machine_id for n in plan.nodes}
    why = [f"machine {n.machine_name} {_gone(n)}" for n in before if n.machine_id not in kept]
    return f"shrunk from {len(before)} to {len(plan.nodes)} nodes" + (f": {', '.join(why)}" if why else "")


def _gone(node: JobNode) -> str:
    """Why a node's machine is not in an elastic job's next attempt, in a word or two."""
    machine = node.machine
    if node.status == N.LOST or machine is None or machine.status == Machine.Status.OFFLINE:
        return "lost" if machine is not None else "removed"
    if machine.status in (Machine.Status.DRAINING, Machine.Status.QUARANTINED):
        return machine.status
    return "failed" if node.status == N.FAILED else "busy"
