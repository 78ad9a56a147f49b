"""What a node's agent is sent to launch it (protocol.NodeLaunch), built from the job's spec and plan."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from torchyard import protocol

from ...bundles.services import bundles_url
from ..models import Job, JobNode
from ..spec import secretbox
from ..spec.cadence import CADENCE_AUTO
from ..spec.jobspec import JobSpec
from ..spec.plan import Plan
from .cadence import checkpoint_cadence
from .links import reused_links
from .memory import memory_launch

# What every rank of a function job runs (workers/torchyard/functions/runner.py).
FUNCTION_RUNNER = "torchyard.functions.runner"


def open_secrets(spec: JobSpec) -> dict[str, str]:
    """The job's secret_env in clear, for its launches only; raises SecretUnreadable."""
    return {name: secretbox.unseal(sealed) for name, sealed in (spec.secret_env or {}).items()}


def launch_payload(job: Job, spec: JobSpec, plan: Plan, node: JobNode, resume_manifest: str) -> dict[str, Any]:
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
        code=code_payload(spec),
        function=_function_payload(job, spec),
        pip=list(spec.runtime.pip),
        args=list(spec.args),
        env=env,
        # Opened only here: the payload crosses Redis to the agent, which gives them to the ranks.
        secret_env=open_secrets(spec),
        config=_script_config(spec, plan) | {"backend": plan.backend, "job_name": job.name, "dataset": spec.dataset},
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
        memory=memory_launch(job, spec, plan, node, resume_manifest),
    ).to_dict()


def _script_config(spec: JobSpec, plan: Plan) -> dict[str, Any]:
    """The spec's sections the script's config holds (torchyard.sdk reads them), as stored; with
    `every_n_steps: auto`, the checkpointing section also says how often the job's machines fail."""
    checkpointing = spec.checkpointing.to_json()
    if spec.checkpointing.every_n_steps == CADENCE_AUTO:
        checkpointing["cadence"] = checkpoint_cadence([int(n.machine_id) for n in plan.nodes],
                                                      [n.machine_name for n in plan.nodes])
    return {"hyperparameters": spec.hyperparameters, "scaling": spec.scaling.to_json(),
            "distributed": spec.distributed.to_json(), "checkpointing": checkpointing,
            "compression": spec.compression.to_json(), "resources": spec.resources.to_json(),
            # The warm launcher's in-place replacements (mode, and how many: max_restarts).
            "fault_tolerance": {"mode": spec.fault_tolerance.mode, "max_restarts": spec.fault_tolerance.max_restarts}}


def _node_volumes(plan: Plan, node: JobNode) -> list[protocol.NodeVolume]:
    """The job's volumes with this node's machine's paths (the plan's), and the machine's name for
    the preflight's messages."""
    planned = plan.node(node.node_rank)
    return [{"name": v.name, "path": v.path, "mount_path": v.mount_path, "access_mode": v.access_mode,
             "machine": node.machine_name} for v in (planned.volumes if planned else None) or []]


def _checkpoint_url(job: Job, spec: JobSpec, volumes: list[protocol.NodeVolume]) -> str:
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


def _function_payload(job: Job, spec: JobSpec) -> protocol.FunctionLaunch:
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


def code_payload(spec: JobSpec) -> protocol.BundleRef:
    code = spec.code
    if not code:
        return {}
    return {"bundle": code.bundle, "size": code.size, "uri": f"{bundles_url()}/{code.bundle}.tar.zst"}
