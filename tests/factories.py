"""Rows the control plane's tests start from: machines brought online through the services an agent's
reports go through, and jobs and nodes with valid specs for tests that start past submission."""

from __future__ import annotations

from torchyard_server.jobs.intake.serializer import JobSpecSerializer
from torchyard_server.jobs.models import Job, JobNode
from torchyard_server.machines.services import machine_create, machine_record_heartbeat

# DistroML's JobSpec (its section 8.3), as written.
DISTROML_JOBSPEC = {
    "name": "mnist-ddp-demo", "framework": "pytorch", "model": "mlp", "dataset": "synthetic",
    "resources": {"workers": 4, "gpus_per_worker": 0},
    "distributed": {"strategy": "data_parallel", "backend": "gloo"},
    "hyperparameters": {"batch_size": 64, "lr": 0.001, "epochs": 2},
    "checkpointing": {"enabled": True, "every_n_steps": 200, "store": "local"},
    "compression": {"enabled": False},
}


def bring_online(name: str, *, gpus: list[dict] | None = None, cpu_count: int = 4):
    """Register a machine and apply one heartbeat, as its agent's first report would."""
    machine, token = machine_create(name=name, host=f"10.9.0.{abs(hash(name)) % 200 + 1}")
    machine_record_heartbeat(
        event={
            "machine": machine.pk,
            "token": token,
            "agent_version": "test",
            "capabilities": {
                "cpu_count": cpu_count,
                "memory": 8 << 30,
                "disk_space": 100 << 30,
                "gpu_count": len(gpus or []),
                "gpu_memory": sum(g["memory_mb"] for g in gpus or []),
                "gpus": gpus or [],
            },
            "load": {"cpu_usage": 1.0, "memory_usage": 10.0, "gpu_usage": []},
        }
    )
    machine.refresh_from_db()
    return machine, token


def job_spec(name: str = "job", **changes) -> dict:
    """A valid JobSpec in the canonical shape the API stores (JobSpecSerializer's output): a built-in
    recipe on one node with one process over gloo, unless `changes` say otherwise."""
    serializer = JobSpecSerializer(
        data={
            "name": name,
            "entrypoint": "examples/mlp_ddp.py",
            "distributed": {"backend": "gloo"},
            **changes,
        }
    )
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def make_job(*, owner, name: str = "job", spec: dict | None = None, **fields) -> Job:
    """A job row in whatever state `fields` give, its spec valid (job_spec with `spec`'s changes, in the
    job's project), for tests that start past submission; tests of submission go through POST /api/jobs."""
    if fields.get("project") is not None:
        spec = {"project": fields["project"].name, **(spec or {})}
    return Job.objects.create(name=name, spec=job_spec(name, **(spec or {})), owner=owner, **fields)


def make_node(
    job: Job, *, node_rank: int = 0, nproc: int = 1, machine=None, attempt: int = 0, **fields
) -> JobNode:
    """One node of `job`'s attempt, its ranks after those of the nodes before it (nproc each, unless
    `fields` say otherwise), on `machine` (its name and host) or else on one named after its rank."""
    fields.setdefault("machine_name", machine.name if machine else f"m{node_rank}")
    fields.setdefault("host", machine.host if machine else f"10.0.0.{node_rank + 1}")
    fields.setdefault("rank_start", node_rank * nproc)
    fields.setdefault("rank_end", fields["rank_start"] + nproc - 1)
    return JobNode.objects.create(
        job=job, attempt=attempt, machine=machine, node_rank=node_rank, nproc=nproc, **fields
    )
