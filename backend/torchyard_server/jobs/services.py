"""Every write to jobs and nodes. The controller (Celery tasks, the ingest loop) calls these; the
API calls the submit and stop ones. Side effects (Celery messages, events) leave on commit."""

from __future__ import annotations

import dataclasses
import logging
import random
import re
import socket
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Max, Min
from django.utils import timezone
from torchyard import protocol

from ..audit import services as audit
from ..bundles.services import bundles_url
from ..celery import app as celery_app
from ..machines.models import Machine
from ..machines.services import MachineInUse, machine_mark_suspect
from ..projects.models import DEFAULT_PROJECT
from ..projects.priorities import priority_label
from ..projects.selectors import project_by_name
from . import secretbox
from .agent_api import bundle_grant
from .events import publish_on_commit
from .jobspec import JobSpec
from .links import reused_links
from .membership import membership_send
from .models import Job, JobNode
from .plan import Plan
from .planner import Candidate, PlanError, plan_in_place, plan_job
from .progress import JobProgress
from .queue_poke import queue_poke_on_commit
from .quotas import beyond_quota, growth_beyond_quota
from .rates import fold_rates
from .registries import resume_manifest_uri
from .selectors import machine_candidates, waiting_ahead_of
from .stalls import clear_moved_ranks, stall_verdict
from .states import JOB_FINAL, NODE_LIVE, transition_job, transition_node
from .stragglers import describe, mark_replace, stragglers_to_replace

log = logging.getLogger(__name__)
J, N = Job.Status, JobNode.Status
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}
# What every rank of a function job runs (workers/torchyard/functions/runner.py).
FUNCTION_RUNNER = "torchyard.functions.runner"
# A node says when a relaunch would fail the same way (its final state's `fatal`): the job's function
# raised, a volume is not shared, versions disagree.
NOT_RETRIED = "(not retried: a relaunch would fail the same way)"


# --- planning -------------------------------------------------------------------------------------
def _port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _pick_master_port(machine: Candidate) -> int:
    """A port for torchrun's store on node 0: not used by another live job on that host, and
    actually bindable when that host is this one (embedded mode and tests)."""
    low, high = settings.MASTER_PORT_RANGE
    taken = set(
        Job.objects.filter(status__in=[J.DISPATCHING, J.RUNNING, J.RECOVERING, J.STOPPING], master_addr=machine.host)
        .exclude(master_port=None)
        .values_list("master_port", flat=True)
    )
    ports = [p for p in range(low, high + 1) if p not in taken]
    random.shuffle(ports)
    for port in ports[:200]:
        if machine.host not in LOCAL_HOSTS or _port_is_free("127.0.0.1", port):
            return port
    raise PlanError(f"no free master port in {low}-{high} on {machine.name}", kind="busy")


def job_preview_plan(*, spec: JobSpec) -> Plan:
    """The plan this spec would get now; raises PlanError. Launches nothing."""
    return plan_job(spec, machine_candidates(), pick_port=_pick_master_port)


# --- submit, schedule, dispatch ------------------------------------------------------------------
def job_submit(*, spec: JobSpec, owner) -> Job:
    """Create a queued job. Refuses (PlanError) a spec that the online machines can never hold,
    except an elastic one short of machines: it waits, saying why, until enough of them join."""
    try:
        job_preview_plan(spec=spec)
    except PlanError as exc:
        if exc.kind != "busy" and not (exc.kind == "capacity" and spec.is_elastic):
            raise
    with transaction.atomic():
        project = project_by_name(spec.project or DEFAULT_PROJECT)
        if project is not None and (too_big := beyond_quota(project, spec)):
            raise PlanError(too_big, kind="capacity")
        job = Job.objects.create(
            name=spec.name, spec=spec.to_json(), owner=owner, project=project, progress=_initial_progress(spec).to_json(),
            priority=int(spec.priority or 0), queued_at=timezone.now(),
        )
        publish_on_commit(
            {"type": protocol.STATE, "job": job.pk, "attempt": 0, "scope": "job",
             "status": J.QUEUED, "previous": None, "reason": "submitted"}
        )
        audit.record(None, audit.Action.JOB_SUBMIT, job, resources=spec.resources.to_json())
        # A queue pass (jobs/queue.py), shared with whatever else asked for one meanwhile.
        queue_poke_on_commit()
    return job


def _initial_progress(spec: JobSpec) -> JobProgress:
    args = spec.args
    total = None
    if "--steps" in args:
        i = args.index("--steps")
        if i + 1 < len(args) and args[i + 1].isdigit():
            total = int(args[i + 1])
    return JobProgress(total_steps=total)


def _send_control(task_name: str, *args: Any) -> None:
    celery_app.send_task(task_name, args=args, queue=protocol.CONTROL_QUEUE)


def job_schedule(*, job_id: int) -> None:
    """A queue pass for a job just queued: it starts when its turn in the queue (jobs/queue.py) lets
    it (queued -> planning -> dispatching), or waits queued with its reason. The pass places every
    job whose turn it is, not only this one: no job jumps the queue by being scheduled by id."""
    from .queue import queue_schedule

    if Job.objects.filter(pk=job_id, status=J.QUEUED).exists():
        queue_schedule()


# Any constant: the key of the one advisory lock that serializes placement on PostgreSQL.
PLACEMENT_LOCK = 7_341_001


def _placement_lock() -> None:
    """Held to the end of the transaction. SQLite needs none: its IMMEDIATE transactions (settings)
    already let one writer in at a time."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [PLACEMENT_LOCK])


def _plan_and_dispatch(*, job_id: int, from_status: str, prefix: str = "") -> None:
    """Plan against the machines as they are and create the attempt's nodes in one transaction,
    under the placement lock: two jobs planned at once by two controller threads can never be given
    the same GPU or the same cores. Locks: placement, then the job, then its nodes."""
    with transaction.atomic():
        _placement_lock()
        job = Job.objects.select_for_update().filter(pk=job_id).first()
        if job is None or job.status != from_status or _live_nodes(job):
            return
        spec = JobSpec.from_json(job.spec)
        try:
            placed = _recovery_plan(job, spec) if from_status == J.RECOVERING else (job_preview_plan(spec=spec), "")
            if placed is None:
                transition_job(job, J.QUEUED, prefix + _waits_its_turn(waiting_ahead_of(job)))
                return
            _open_secrets(spec)
        except PlanError as exc:
            transition_job(job, J.FAILED if exc.kind == "invalid" else J.QUEUED, prefix + exc.reason)
            return
        except secretbox.SecretUnreadable as exc:
            # Nothing will open them later either: fail now rather than leave the job half-dispatched.
            transition_job(job, J.FAILED, prefix + str(exc))
            return
        plan = placed[0]
        _dispatch(job, plan, how=placed[1])
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
    in_place = plan_in_place(spec, previous, own, pick_port=_pick_master_port)
    if in_place is not None:
        return in_place
    if not waiting_ahead_of(job):
        return job_preview_plan(spec=spec), ""
    held = previous.held_machine_ids
    try:
        return plan_job(spec, [m for m in own if m.id in held], pick_port=_pick_master_port), \
            "re-planned on the machines it held"
    except PlanError:  # of any kind: other machines might do, in its turn
        return None


def _waits_its_turn(ahead: list[tuple[int, int]]) -> str:
    """A recovery that needs machines other than its own, behind waiting jobs: where it waits."""
    first, priority = ahead[0]
    others = f" and {len(ahead) - 1} more" if len(ahead) > 1 else ""
    return (f"its machines cannot take it back, and #{first} (priority {priority_label(priority)}){others} "
            f"{'wait' if others else 'waits'} ahead of it in the queue: it waits its turn for other machines")


def _open_secrets(spec: JobSpec) -> dict[str, str]:
    """The job's secret_env in clear, for its launches only; raises SecretUnreadable."""
    return {name: secretbox.unseal(sealed) for name, sealed in (spec.secret_env or {}).items()}


def _next_attempt(job: Job) -> int:
    """0 for a first launch; one more than the last attempt that launched anything otherwise."""
    last = job.nodes.aggregate(last=Max("attempt"))["last"]
    return 0 if last is None else last + 1


def _dispatch(job: Job, plan: Plan, how: str = "", *, after_preemption: bool = False) -> None:
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
    _warm_spares(spec, plan)
    for node in nodes:
        transition_node(node, N.LAUNCHING, f"sent to {node.machine_name}")
        launch = _launch_payload(job, spec, plan, node, resume)
        machine_id = node.machine_id
        transaction.on_commit(
            lambda launch=launch, machine_id=machine_id: celery_app.send_task(
                protocol.TASK_LAUNCH_NODE, kwargs={"launch": launch}, queue=protocol.machine_queue(machine_id)
            )
        )


def _warm_spares(spec: JobSpec, plan: Plan) -> None:
    """Each hot spare prepares the job's code and environment into its machine's cache, and a warm
    pool of that environment's Python, as a node of the job would: taking a lost node's place then
    costs what a recovery in place does."""
    code, pip = _code_payload(spec), list(spec.runtime.pip)
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


def job_grow_at_checkpoint(*, job_id: int, attempt: int) -> bool:
    """An elastic job below its most nodes committed a checkpoint (checkpoints.services calls this):
    when more machines fit it now and its attempt has run elastic.min_interval seconds, stop the
    attempt (without counting a restart) so that recovery relaunches it larger from that checkpoint.
    True when it asked."""
    stored = Job.objects.filter(pk=job_id, status=J.RUNNING, attempt=attempt).values_list("spec", flat=True).first()
    if stored is None or not JobSpec.from_json(stored).is_elastic:
        return False  # most jobs: no placement lock taken for their checkpoints
    with transaction.atomic():
        _placement_lock()
        job = Job.objects.select_for_update().filter(pk=job_id).first()
        spec = JobSpec.from_json(job.spec if job is not None else None)
        if job is None or job.status != J.RUNNING or job.attempt != attempt or not spec.is_elastic:
            return False
        current = Plan.from_json(job.plan).nnodes
        if not current or current >= spec.resources.most_nodes:
            return False
        interval = spec.resize_interval
        started = job.nodes.filter(attempt=attempt).aggregate(first=Min("created_at"))["first"]
        if started is None or started > timezone.now() - timedelta(seconds=interval):
            return False
        if waiting_ahead_of(job):
            return False  # the free machines are theirs first (its relaunch would wait behind them)
        try:
            # As if this job's own nodes were gone: they are stopped before the relaunch.
            larger = plan_job(spec, machine_candidates(exclude_job=job.pk), pick_port=lambda machine: 0)
        except PlanError:
            return False
        if larger.nnodes <= current:
            return False
        if growth_beyond_quota(job, larger):
            return False
        transition_job(job, J.RECOVERING, f"growing from {current} to {larger.nnodes} nodes: stopping attempt "
                       f"{attempt} at its committed checkpoint")
        _stop_nodes(_live_nodes(job))
    return True


def job_replace_stragglers_at_checkpoint(*, job_id: int, attempt: int) -> bool:
    """A job under `fault_tolerance.stragglers: replace` committed a checkpoint while a straggler
    waited for one (stragglers.py): stop the attempt (without counting a restart) so that recovery
    relaunches it from that checkpoint with a hot spare in the straggler's node's place. Only onto a
    spare: without one the straggler stays, and the job's stragglers say why. True when it asked."""
    stored = Job.objects.filter(pk=job_id, status=J.RUNNING, attempt=attempt).first()
    if stored is None or not stragglers_to_replace(stored):
        return False  # most jobs: no placement lock taken for their checkpoints
    with transaction.atomic():
        _placement_lock()
        job = Job.objects.select_for_update().filter(pk=job_id).first()
        if job is None or job.status != J.RUNNING or job.attempt != attempt:
            return False
        waiting = stragglers_to_replace(job)
        if not waiting:
            return False
        spec, plan = JobSpec.from_json(job.spec), Plan.from_json(job.plan)
        leaving = {}
        for entry in waiting:
            node = plan.node(int(entry["node_rank"]))
            if node is not None:
                leaving[str(node.machine_id)] = f"straggler: rank {entry['rank']}, {entry['ratio'] or '?'}x the median"
        planned = dataclasses.replace(plan, leaving=leaving)
        own = machine_candidates(exclude_job=job.pk)
        if plan_in_place(spec, planned, own, pick_port=lambda machine: 0) is None:
            mark_replace(job, [e["rank"] for e in waiting], "no hot spare to take its place: reported only")
            return False
        mark_replace(job, [e["rank"] for e in waiting], "replaced")
        transition_job(job, J.RECOVERING, "replacing " + "; ".join(describe(e) for e in waiting) +
                       f": stopping attempt {attempt} at its committed checkpoint", plan=planned.to_json())
        _stop_nodes(_live_nodes(job))
    return True


def _launch_payload(job: Job, spec: JobSpec, plan: Plan, node: JobNode, resume_manifest: str) -> dict[str, Any]:
    env = dict(spec.env)
    if node.gpus:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in node.gpus)
    timeout = float(spec.fault_tolerance.heartbeat_timeout)
    volumes = _node_volumes(plan, node)
    return protocol.NodeLaunch(
        job_id=job.pk,
        attempt=node.attempt,
        node_id=node.pk,
        node_rank=node.node_rank,
        nnodes=plan.nnodes,
        nproc_per_node=plan.procs_per_node,
        world_size=plan.world_size,
        master_addr=plan.master_addr,
        master_port=plan.master_port,
        entrypoint=spec.entrypoint or "",
        module=FUNCTION_RUNNER if spec.function else spec.module or "",
        code=_code_payload(spec),
        function=_function_payload(job, spec),
        pip=list(spec.runtime.pip),
        args=list(spec.args),
        env=env,
        # Opened only here: the payload crosses Redis to the agent, which gives them to the ranks.
        secret_env=_open_secrets(spec),
        config=_script_config(spec) | {"backend": plan.backend, "job_name": job.name, "dataset": spec.dataset},
        checkpoint_url=_checkpoint_url(job, spec, volumes),
        resume_manifest=resume_manifest,
        backend=plan.backend,
        heartbeat_interval=max(0.5, min(2.0, timeout / 4)),
        stall_timeout=spec.fault_tolerance.stall_seconds,
        on_stall=spec.fault_tolerance.on_stall,
        pace_every=spec.fault_tolerance.pace_every,
        exit_grace=spec.fault_tolerance.exit_grace,
        volumes=volumes,
        launcher=spec.distributed.launcher,
        command=list(spec.distributed.command or []),
        peers=[{"node_rank": n.node_rank, "host": n.host, "machine": n.machine_name}
               for n in sorted(plan.nodes, key=lambda n: n.node_rank)],
        links=reused_links(job, plan),
    ).to_dict()


def _script_config(spec: JobSpec) -> dict[str, Any]:
    """The spec's sections the script's config holds (torchyard.sdk reads them), as stored."""
    return {"hyperparameters": spec.hyperparameters, "scaling": spec.scaling.to_json(),
            "distributed": spec.distributed.to_json(), "checkpointing": spec.checkpointing.to_json(),
            "compression": spec.compression.to_json(), "resources": spec.resources.to_json()}


def _node_volumes(plan: Plan, node: JobNode) -> list[dict[str, Any]]:
    """The job's volumes with this node's machine's paths (the plan's), and the machine's name for
    the preflight's messages."""
    planned = plan.node(node.node_rank)
    return [{**v.to_json(), "machine": node.machine_name} for v in (planned.volumes if planned else None) or []]


def _checkpoint_url(job: Job, spec: JobSpec, volumes: list[dict[str, Any]]) -> str:
    """The store's folder of the job, or with `checkpointing.store: volume:NAME` a folder on that
    volume at this node's machine's path (the server need not see it)."""
    store = str(spec.checkpointing.store or "default")
    if store.startswith("volume:"):
        name = store.split(":", 1)[1]
        path = next(v["path"] for v in volumes if v["name"] == name)
        return f"file://{path.rstrip('/')}/torchyard-checkpoints/job-{job.pk}"
    return _job_store_url(job)


def _job_store_url(job: Job) -> str:
    """The job's own folder of the server's store: checkpoints by default, artifacts, results."""
    return f"{settings.STORAGE_URL.rstrip('/')}/job-{job.pk}"


def _function_payload(job: Job, spec: JobSpec) -> dict[str, Any]:
    """A function job's payload bundle and where its ranks' results go (the server's store, always:
    the API reads them from there)."""
    function = spec.function
    if not function:
        return {}
    sha256 = function.payload
    return {
        "payload": {"bundle": sha256, "size": function.size, "uri": f"{bundles_url()}/{sha256}.tar.zst"},
        "name": function.name,
        "result_max_bytes": int(function.result_max_bytes or settings.RESULT_MAX_BYTES),
        "results_url": f"{_job_store_url(job)}/results",
    }


def _code_payload(spec: JobSpec) -> dict[str, Any]:
    code = spec.code
    if not code:
        return {}
    return {"bundle": code.bundle, "size": code.size, "uri": f"{bundles_url()}/{code.bundle}.tar.zst"}


# --- stopping -------------------------------------------------------------------------------------
def _stop_nodes(nodes: list[JobNode]) -> None:
    for node in nodes:
        if node.machine_id is None:
            continue
        kwargs = {"job_id": node.job_id, "attempt": node.attempt, "node_rank": node.node_rank, "node_id": node.pk}
        machine_id = node.machine_id
        transaction.on_commit(
            lambda kwargs=kwargs, machine_id=machine_id: celery_app.send_task(
                protocol.TASK_STOP_NODE, kwargs=kwargs, queue=protocol.machine_queue(machine_id)
            )
        )


def _live_nodes(job: Job) -> list[JobNode]:
    return list(job.nodes.filter(status__in=NODE_LIVE))


def job_stop(*, job_id: int, reason: str = "stop requested") -> Job | None:
    """Stop every node of the job: live -> stopping -> stopped (at once when nothing runs yet)."""
    with transaction.atomic():
        job = Job.objects.select_for_update().filter(pk=job_id).first()
        if job is None or job.status in JOB_FINAL or job.status == J.STOPPING:
            return job
        audit.record(None, audit.Action.JOB_STOP, job, previous=job.status, reason=reason)
        live = _live_nodes(job)
        if job.status in (J.QUEUED, J.PREEMPTED, J.PLANNING) or not live:
            transition_job(job, J.STOPPED, reason)
            return job
        transition_job(job, J.STOPPING, reason)
        _stop_nodes(live)
    return job


def job_preempt(*, job_id: int, reason: str, grace: float) -> bool:
    """Ask a running job to checkpoint and yield (lossless preemption, jobs/queue.py chooses it):
    running -> preempting, and each live node's agent writes the request its ranks and supervisor
    watch (agent/runs.py request_preemption). Once no node runs it waits as `preempted`. False when
    the job is no longer running (the transition is conditional). Locks: the job (the caller holds
    the placement lock)."""
    job = Job.objects.select_for_update().filter(pk=job_id).first()
    if job is None or job.status != J.RUNNING:
        return False
    if not transition_job(job, J.PREEMPTING, f"{reason}; checkpointing and yielding (grace {grace:g} s)"):
        return False
    for node in _live_nodes(job):
        if node.machine_id is None:
            continue
        kwargs = {"job_id": job.pk, "attempt": node.attempt, "node_rank": node.node_rank, "grace": grace,
                  "reason": reason}
        machine_id = node.machine_id
        transaction.on_commit(lambda kwargs=kwargs, machine_id=machine_id: celery_app.send_task(
            protocol.TASK_PREEMPT_NODE, kwargs=kwargs, queue=protocol.machine_queue(machine_id)))
    return True


def _preempted_when_quiet(job: Job) -> None:
    """A preempting job whose last node ended waits in the queue again (or completed, when every node
    of the attempt finished first). Its next start is a new attempt from its last committed
    checkpoint, counting no restart."""
    if job.status != J.PREEMPTING or _live_nodes(job):
        return
    if not job.nodes.filter(attempt=job.attempt).exclude(status=N.COMPLETED).exists():
        transition_job(job, J.COMPLETED, "every node exited 0 (it finished before yielding)")
        return
    yielded = job.nodes.filter(attempt=job.attempt, status_reason__contains="yielded for preemption").count()
    total = job.nodes.filter(attempt=job.attempt).count()
    how = "yielded after committing a checkpoint" if yielded == total else \
        f"stopped ({yielded} of {total} nodes yielded); it resumes from its last committed checkpoint"
    transition_job(job, J.PREEMPTED, f"{how}; waiting in the queue again ({job.status_reason.split(';')[0]})")


def job_delete(*, job: Job) -> None:
    """Delete a finished job with its nodes, events and records (a live one is stopped instead)."""
    with transaction.atomic():
        audit.record(None, audit.Action.JOB_DELETE, job, status=job.status)
        job.delete()


def _finish_stopping_if_done(job: Job) -> None:
    if job.status == J.STOPPING and not _live_nodes(job):
        transition_job(job, J.STOPPED, job.status_reason or "stopped")


def _winding_down(job: Job) -> bool:
    """A node ended while the job was already stopping or recovering: once the last one is down,
    finish the stop or start the relaunch. False when the job is in neither state."""
    if job.status == J.STOPPING:
        _finish_stopping_if_done(job)
        return True
    if job.status == J.RECOVERING:
        _recover_when_quiet(job)
        return True
    if job.status == J.PREEMPTING:
        _preempted_when_quiet(job)
        return True
    return False


# --- what the nodes report (via the ingest loop) --------------------------------------------------
def _describe(node: JobNode) -> str:
    return f"node {node.node_rank} ({node.machine_name})"


def node_report_state(*, event: dict[str, Any]) -> None:
    """Apply a supervisor's state report. The report itself is already persisted as the node's
    state event, so the node transition is not announced again; job transitions are."""
    status = event.get("status")
    job_id = JobNode.objects.filter(pk=event.get("node")).values_list("job_id", flat=True).first()
    if job_id is None:
        return
    with transaction.atomic():
        # Lock order everywhere: the job, then its nodes (two orders deadlock exactly when nodes fail).
        job = Job.objects.select_for_update().get(pk=job_id)
        node = JobNode.objects.select_for_update().filter(pk=event.get("node")).first()
        if node is None:
            return
        if status == protocol.NODE_PREPARING:
            transition_node(node, N.PREPARING, str(event.get("reason") or "preparing"), announce=False,
                            last_heartbeat=timezone.now())
        elif status == protocol.NODE_RUNNING:
            if transition_node(node, N.RUNNING, "running", announce=False, pid=event.get("pid"),
                               last_heartbeat=timezone.now()) and job.attempt == node.attempt:
                membership_send(job_id=job.pk, attempt=node.attempt)
            if isinstance(event.get("ray"), dict):
                # framework ray: the node's Ray ports (the head's dashboard port: GET /api/jobs/{id}/ray/).
                node_merge_progress(node.pk, {"ray": event["ray"]})
            if job.attempt == node.attempt and job.status == J.DISPATCHING and not job.nodes.filter(
                attempt=node.attempt).exclude(status=N.RUNNING).exists():
                transition_job(job, J.RUNNING, f"all {job.world_size} ranks running")
        elif status == protocol.NODE_COMPLETED:
            warning = str(event.get("warning") or "")
            if transition_node(node, N.COMPLETED, f"exited 0{COMPLETED_WARNING}{warning}" if warning else "exited 0",
                               announce=False, exit_code=0) and job.attempt == node.attempt:
                # The nodes still running learn it: a rank that outlives every other one is ended (supervisor/linger.py).
                membership_send(job_id=job.pk, attempt=node.attempt)
            if _is_ray(JobSpec.from_json(job.spec)) and node.node_rank == 0 and job.attempt == node.attempt and job.status not in JOB_FINAL \
                    and job.status not in (J.STOPPING, J.RECOVERING):
                # A Ray job is its driver on the head: done when it exits 0; the workers' raylets
                # block until stopped.
                _stop_nodes([n for n in _live_nodes(job) if n.pk != node.pk])
                transition_job(job, J.COMPLETED, "the Ray driver exited 0")
            elif not _winding_down(job) and job.attempt == node.attempt and not job.nodes.filter(
                attempt=node.attempt).exclude(status=N.COMPLETED).exists():
                transition_job(job, J.COMPLETED, "every node exited 0" + _completion_warnings(job))
        elif status in (protocol.NODE_FAILED, protocol.NODE_STOPPED):
            failed = status == protocol.NODE_FAILED
            reason = str(event.get("reason") or ("failed" if failed else "stopped"))
            if transition_node(node, N.FAILED if failed else N.STOPPED, reason, announce=False,
                               exit_code=event.get("exit_code")) and job.attempt == node.attempt:
                # Queued before the stops _node_lost_or_failed sends: the others learn first.
                membership_send(job_id=job.pk, attempt=node.attempt)
            fatal = failed and event.get("fatal") is True
            if fatal and job.status == J.RECOVERING and job.attempt == node.attempt:
                # Another node's failure (its ranks saw this one's go away) started a recovery; this
                # node says a relaunch would fail the same way (the job's function raised).
                transition_job(job, J.FAILED, f"{_describe(node)}: {_without_node_rank(reason)}\n{NOT_RETRIED}")
            elif not _winding_down(job) and job.attempt == node.attempt and job.status not in JOB_FINAL:
                detail = reason if failed else f"{_describe(node)} stopped unexpectedly: {reason}"
                _node_lost_or_failed(job, node, detail, last_lines=event.get("last_lines") or [], fatal=fatal)


# Between "exited 0" and the warning a node completed with, in its status reason.
COMPLETED_WARNING = "; warning: "


def _completion_warnings(job: Job) -> str:
    """The warnings the attempt's nodes completed with (a rank ended for outliving the job's work),
    for the job's own completion: "" when there were none."""
    reasons = job.nodes.filter(attempt=job.attempt, status_reason__contains=COMPLETED_WARNING).order_by("node_rank")
    return "".join(f"{COMPLETED_WARNING}{_describe(node)}: {node.status_reason.split(COMPLETED_WARNING, 1)[1]}"
                   for node in reasons)


def _without_node_rank(reason: str) -> str:
    """A supervisor's reason without its "node rank N: " opening (the controller names the machine)."""
    return re.sub(r"^node rank \d+:\s*", "", reason)


def _quote(node: JobNode, line: Any) -> str:
    """One of a failed node's last lines; torchrun's own and the preparation's have no rank."""
    if not isinstance(line, dict):
        return str(line)
    who = f"rank {line['rank']}" if line.get("rank") is not None else f"node {node.node_rank}"
    return f"[{who}] {line.get('line')}"


def _is_ray(spec: JobSpec) -> bool:
    return spec.distributed.launcher == "ray"


def _node_lost_or_failed(job: Job, node: JobNode, reason: str, *, last_lines: list[Any], fatal: bool = False) -> None:
    """One node of the current attempt ended badly: stop the others, then either recover (relaunch
    every node from the last committed checkpoint, up to fault_tolerance.max_restarts times) or
    fail the job with the reason. A `fatal` failure (the node says retrying cannot help: the job's
    function raised, a volume is not shared) fails the job at once."""
    tail = "\n".join(_quote(node, line) for line in last_lines[-protocol.FAILURE_LOG_LINES :])
    # The supervisor says "node rank N: ..."; name the machine too, once.
    reason = _without_node_rank(reason)
    full_reason = reason if reason.startswith(_describe(node)) else f"{_describe(node)}: {reason}"
    if verdict := stall_verdict(job, node.attempt):
        # The rank that held the others, where the stall view has named it (jobs/stalls.py).
        full_reason += f"\nstall verdict: {verdict}"
    if tail:
        full_reason += "\nlast log lines:\n" + tail
    others = [n for n in _live_nodes(job) if n.pk != node.pk]
    spec = JobSpec.from_json(job.spec)
    if (not fatal and _is_ray(spec) and node.node_rank != 0 and job.status not in JOB_FINAL
            and spec.fault_tolerance.ray_worker_loss == "tolerate"
            and any(n.node_rank == 0 for n in others)):
        # fault_tolerance.ray_worker_loss: tolerate: the driver handles a lost Ray worker itself.
        log.warning("job %s: %s; the Ray job goes on (ray_worker_loss: tolerate)", job.pk, full_reason)
        return
    _stop_nodes(others)
    max_restarts = int(spec.fault_tolerance.max_restarts)
    if not fatal and job.status in (J.DISPATCHING, J.RUNNING) and job.restarts < max_restarts:
        transition_job(job, J.RECOVERING, f"restart {job.restarts + 1} of {max_restarts} after {full_reason}",
                       restarts=job.restarts + 1)
        _recover_when_quiet(job)
    else:
        if fatal:
            full_reason += f"\n{NOT_RETRIED}"
        elif max_restarts:
            full_reason += f"\n(gave up after {max_restarts} restart{'s' if max_restarts != 1 else ''})"
        transition_job(job, J.FAILED, full_reason)


def jobs_interrupt(*, reason: str) -> list[int]:
    """Torchyard itself is stopping (embedded mode's Ctrl-C ends training with it): live jobs go to
    `recovering` without using a restart, and resume from their last checkpoint on the next start."""
    interrupted = []
    for job_id in Job.objects.filter(status__in=[J.DISPATCHING, J.RUNNING]).values_list("pk", flat=True):
        with transaction.atomic():
            job = Job.objects.select_for_update().get(pk=job_id)
            if transition_job(job, J.RECOVERING, reason):
                interrupted.append(job_id)
    return interrupted


MAX_RESTART_DELAY = 60.0


def recovery_delay(restarts: int, first: float = 0.0) -> float:
    """Backoff before the restart numbered `restarts` (1 is the first): `first` seconds (the job's
    fault_tolerance.restart_delay), doubling for each next restart, at most 60 s. With `first` 0 the
    first restart goes at once (a single failure says nothing about the next try), then 2 s, 4 s ..."""
    if restarts <= 1:
        return min(first, MAX_RESTART_DELAY)
    return min(MAX_RESTART_DELAY, (first or 1.0) * 2.0 ** (restarts - 1))


def _restart_delay(job: Job) -> float:
    return recovery_delay(job.restarts, JobSpec.from_json(job.spec).fault_tolerance.restart_delay)


def _recover_when_quiet(job: Job) -> None:
    """Relaunch once no node of the failed attempt runs any more (each report re-checks)."""
    if job.status == J.RECOVERING and not _live_nodes(job):
        delay = _restart_delay(job)
        transaction.on_commit(lambda: celery_app.send_task(
            "torchyard_server.jobs.tasks.recover_job", args=(job.pk,), queue=protocol.CONTROL_QUEUE, countdown=delay))


def job_recover(*, job_id: int) -> None:
    """recovering -> dispatching with the next attempt, or queued when the machines are not there."""
    _plan_and_dispatch(job_id=job_id, from_status=J.RECOVERING, prefix="recovery: ")


def node_record_heartbeats(*, beats: dict[int, float]) -> None:
    """Node liveness from supervisor heartbeats (last one per node in a batch)."""
    now = timezone.now()
    for node_id in beats:
        JobNode.objects.filter(pk=node_id, status__in=NODE_LIVE).update(last_heartbeat=now)


def job_record_progress(*, job_id: int, metrics: list[dict[str, Any]]) -> None:
    """Fold metric events into the job's and nodes' progress summaries (latest step wins).

    Under the job's row lock, as every writer of `progress` (stalls.job_record_stall, and _dispatch,
    whose caller holds it): read unlocked, a fold racing a new attempt's dispatch wrote the old
    attempt's ranks back over its reset. Metrics of an earlier attempt (late in the stream) fold
    into nothing."""
    with transaction.atomic():
        job = Job.objects.select_for_update().filter(pk=job_id).first()
        if job is None:
            return
        metrics = [m for m in metrics if m.get("attempt", job.attempt) == job.attempt]
        if metrics:
            _fold_progress(job, metrics)
    # Each node's own latest report, outside the job's lock: taking node rows while holding it
    # could deadlock with a transition that takes them in the other order.
    latest = {m["node"]: m for m in metrics if m.get("node")}
    for node_id, m in latest.items():
        node_merge_progress(node_id, {k: m[k] for k in ("step", "loss", "throughput") if m.get(k) is not None})


def node_merge_progress(node_id: int, values: dict[str, Any]) -> None:
    """The one writer of a node's progress: `values` merged into what it holds, under its row lock.
    Two things write there, the node's `running` report (a Ray node's ports under "ray") and the
    metric fold (step, loss, throughput); replacing the whole dict lost the other's part."""
    if not values:
        return
    with transaction.atomic():
        held = list(JobNode.objects.select_for_update().filter(pk=node_id).values_list("progress", flat=True))
        if held:
            JobNode.objects.filter(pk=node_id).update(
                progress={**(held[0] if isinstance(held[0], dict) else {}), **values})


def _fold_progress(job: Job, metrics: list[dict[str, Any]]) -> None:
    progress = JobProgress.from_json(job.progress)
    latest = max(metrics, key=lambda m: (m.get("step") or 0))
    for key in ("step", "loss", "throughput", "lr"):
        if latest.get(key) is not None:
            setattr(progress, key, latest[key])
    # Ranks report their own throughput; the job's is the sum of every rank's latest report.
    by_rank: dict[str, float] = dict(progress.throughput_by_rank or {})
    for m in metrics:
        if m.get("throughput") is not None:
            by_rank[str(m.get("rank"))] = float(m["throughput"])
    if by_rank:
        progress.throughput_by_rank = by_rank
        progress.throughput = sum(by_rank.values())
    # Every rank's last step: stall verdicts compare a stalled rank with the others (stalls.py).
    steps: dict[str, int] = dict(progress.step_by_rank or {})
    for m in metrics:
        if isinstance(m.get("step"), int) and m.get("rank") is not None:
            steps[str(m["rank"])] = m["step"]
    progress.step_by_rank = steps
    clear_moved_ranks(progress, steps, job.world_size)
    fold_rates(progress, metrics)
    Job.objects.filter(pk=job.pk).update(progress=progress.to_json())


# --- supervision sweep (beat) ---------------------------------------------------------------------
def jobs_supervise() -> None:
    """Find what went quiet: nodes without heartbeats, nodes that never started, stops that
    nobody answered."""
    now = timezone.now()
    for node in JobNode.objects.filter(status__in=NODE_LIVE).select_related("job"):
        job = node.job
        spec = JobSpec.from_json(job.spec)
        timeout = float(spec.fault_tolerance.heartbeat_timeout)
        if node.status in (N.PREPARING, N.RUNNING) and node.last_heartbeat and node.last_heartbeat < now - timedelta(seconds=timeout):
            _mark_lost(node, f"{_describe(node)} lost: no heartbeat for {timeout:.0f}s")
        elif node.status in (N.PENDING, N.LAUNCHING) and node.created_at < now - timedelta(
            seconds=settings.NODE_LAUNCH_TIMEOUT
        ):
            _mark_lost(node, f"{_describe(node)} did not start within {settings.NODE_LAUNCH_TIMEOUT:.0f}s")
        elif job.status in (J.STOPPING, J.RECOVERING) and job.updated_at < now - timedelta(
            seconds=settings.STOP_TIMEOUT
        ):
            _mark_lost(node, f"{_describe(node)} did not confirm the stop within {settings.STOP_TIMEOUT:.0f}s")
        elif job.status == J.PREEMPTING and job.updated_at < now - timedelta(
            # The supervisor stops it after the grace, or after a commit it waits for (one more grace).
            seconds=2 * spec.preemption_grace + settings.STOP_TIMEOUT
        ):
            _mark_lost(node, f"{_describe(node)} did not yield nor stop after its preemption grace")
    _recover_stalled()


def _recover_stalled() -> None:
    """A recovery whose delayed task was lost (broker restart) is picked up here."""
    now = timezone.now()
    # Quiet for 10 s first: the job's spec (its restart_delay) is read only for those.
    for job in Job.objects.filter(status=J.RECOVERING, updated_at__lt=now - timedelta(seconds=10)):
        if job.updated_at < now - timedelta(seconds=_restart_delay(job) + 10) and not _live_nodes(job):
            job_recover(job_id=job.pk)


def _mark_lost(node: JobNode, reason: str) -> None:
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=node.job_id)
        node = JobNode.objects.select_for_update().get(pk=node.pk)
        if not transition_node(node, N.LOST, reason):
            return
        if node.machine_id is not None:
            machine_mark_suspect(machine_id=node.machine_id)
        if job.attempt == node.attempt:
            # The other nodes learn it is gone before any stop reaches them.
            membership_send(job_id=job.pk, attempt=node.attempt)
        # Make sure nothing of it keeps running should the agent still be there.
        _stop_nodes([node])
        if not _winding_down(job) and job.attempt == node.attempt and job.status not in JOB_FINAL:
            _node_lost_or_failed(job, node, reason, last_lines=[])


def nodes_on_removed_machine(*, machine: Machine, force: bool) -> None:
    """A machine is about to be removed (machines.registries.machine_removals): refuse while nodes of
    live jobs run there, or with force declare them lost, which stops them and recovers their jobs."""
    live = list(JobNode.objects.filter(machine=machine, status__in=NODE_LIVE).select_related("job"))
    if not live:
        return
    if not force:
        jobs = sorted({node.job_id for node in live})
        raise MachineInUse(
            f"{machine.name} runs {len(live)} live node(s) of job(s) {', '.join(f'#{j}' for j in jobs)}; "
            "stop them first, or remove it with force (?force=true), which stops them and recovers the jobs elsewhere",
            [{"job": n.job_id, "node_rank": n.node_rank, "attempt": n.attempt, "status": n.status} for n in live],
        )
    for node in live:
        _mark_lost(node, f"{_describe(node)} lost: its machine was removed")


def jobs_schedule_queued() -> None:
    """The beat's queue pass (jobs/queue.py), after its chores: time limits, usage rows left open."""
    from .queue import queue_housekeeping, queue_schedule

    queue_housekeeping()
    queue_schedule()
