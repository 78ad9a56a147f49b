"""TransformerLab's payloads: its DistributedTrainingConfig (a job as the TransformerLab browser described
it) translated to a JobSpec and back, and its DistributedJobStatus."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from ...jobs.control.admission import admit_spec
from ...jobs.intake.serializer import JobSpecSerializer
from ...jobs.models import Job
from ...jobs.spec.jobspec import JobSpec
from ...plugins.services import plugin_job_parts, plugin_of_spec


class ResourceRequirements(serializers.Serializer):
    num_machines = serializers.IntegerField(min_value=1, max_value=256, default=1)
    gpus_per_machine = serializers.IntegerField(min_value=0, max_value=64, default=0)
    min_gpu_memory = serializers.IntegerField(min_value=0, default=0, help_text="MB per GPU")
    procs_per_machine = serializers.IntegerField(min_value=1, max_value=64, default=1, help_text="Torchyard's")


class DistributedTrainingConfig(serializers.Serializer):
    """TransformerLab's DistributedTrainingConfig; `plugin_name` is a registered plugin (`GET /api/plugins`)
    or a built-in recipe (`mlp_ddp` or its path)."""

    plugin_name = serializers.CharField(max_length=200, help_text="a plugin of GET /api/plugins (registered or built-in)")
    config = serializers.DictField(default=dict, help_text="the hyperparameters")
    resource_requirements = ResourceRequirements(default=dict)
    machine_selection = serializers.ChoiceField(choices=["auto", "manual"], default="auto")
    selected_machines = serializers.ListField(child=serializers.CharField(max_length=100), default=list)
    args = serializers.ListField(child=serializers.CharField(max_length=4096), default=list, help_text="Torchyard's")
    project = serializers.CharField(max_length=63, default="default", help_text="Torchyard's: the job's project")

    def validate(self, attrs):
        if attrs["machine_selection"] == "manual" and not attrs["selected_machines"]:
            raise serializers.ValidationError({"selected_machines": ["manual selection needs machines."]})
        return attrs


def default_requirements() -> dict[str, Any]:
    defaults = ResourceRequirements(data={})
    defaults.is_valid(raise_exception=True)
    return dict(defaults.validated_data)


def spec_from_seed(data: dict[str, Any], request, *, name: str | None = None) -> dict[str, Any]:
    """Translate a validated DistributedTrainingConfig into a JobSpec and validate it like any other.
    A registered plugin runs its bundle's entrypoint through the harness (launcher accelerate), its
    default config under the request's `config`."""
    plugin = data["plugin_name"]
    parts = plugin_job_parts(name=plugin, project=data["project"], user=request.user)
    # A nested serializer's default ({}) is not validated: its own defaults fill an absent section.
    req = data["resource_requirements"] or default_requirements()
    spec: dict[str, Any] = {
        "name": name or plugin.rsplit("/", 1)[-1].removesuffix(".py"),
        "project": data["project"],
        "entrypoint": parts["entrypoint"],
        **{key: parts[key] for key in ("code", "distributed") if key in parts},
        "args": data["args"],
        "hyperparameters": {**parts["default_config"], **data["config"]},
        "resources": {"nodes": req["num_machines"], "procs_per_node": req["procs_per_machine"],
                      "gpus_per_node": req["gpus_per_machine"], "min_gpu_memory": req["min_gpu_memory"]},
        "placement": {"policy": "spread", "machines": data["selected_machines"] if data["machine_selection"] == "manual" else []},
    }
    validated = JobSpecSerializer(data=spec)
    validated.is_valid(raise_exception=True)
    return admit_spec(validated.validated_data, user=request.user)


def seed_body(request) -> dict[str, Any]:
    """The JobSpec of a request whose body is a DistributedTrainingConfig."""
    body = DistributedTrainingConfig(data=request.data)
    body.is_valid(raise_exception=True)
    return spec_from_seed(body.validated_data, request)


def seed_config_of(stored: dict[str, Any]) -> dict[str, Any]:
    """A JobSpec seen as the seed's DistributedTrainingConfig (what a task shows). `plugin_name` is
    a built-in recipe's short name, a registered plugin's name, else the entrypoint (or module) in the
    job's code; a DistroML spec (`resources.workers`) has no fixed machine count until it is planned (null)."""
    spec = JobSpec.from_json(stored)
    entrypoint = spec.entrypoint or spec.module or ""
    builtin = not spec.code and entrypoint.startswith("examples/")
    plugin = None if builtin else plugin_of_spec(spec)
    resources, machines = spec.resources, spec.placement.machines
    return {
        "plugin_name": (entrypoint.removeprefix("examples/").removesuffix(".py") if builtin
                        else plugin.name if plugin is not None else entrypoint),
        "config": spec.hyperparameters,
        "resource_requirements": {
            "num_machines": resources.nodes,
            "gpus_per_machine": resources.gpus_per_node,
            "min_gpu_memory": resources.min_gpu_memory,
            "procs_per_machine": resources.procs_per_node,
        },
        "machine_selection": "manual" if machines else "auto",
        "selected_machines": list(machines),
        "args": list(spec.args),
        "project": spec.project or "default",
    }


def job_status(job: Job, *, machine_id: int | None = None, seed_job_id: str | None = None) -> dict[str, Any]:
    """The seed's DistributedJobStatus of a job; only the nodes on one machine when given."""
    nodes = [n for n in job.nodes.all() if n.attempt == job.attempt and machine_id in (None, n.machine_id)]
    total = (job.progress or {}).get("total_steps")
    return {
        "job_id": job.pk,
        "seed_job_id": seed_job_id,
        "status": job.status,
        "status_reason": job.status_reason,
        "world_size": job.world_size,
        "attempt": job.attempt,
        "master_addr": job.master_addr,
        "master_port": job.master_port,
        "nodes": [
            {
                "machine_id": n.machine_id,
                "machine_name": n.machine_name,
                "rank": n.node_rank,
                "ranks": [n.rank_start, n.rank_end],
                "status": n.status,
                "start_time": n.started_at,
                "end_time": n.finished_at,
                "progress": (100.0 * (n.progress or {}).get("step", 0) / total) if total and n.progress else None,
            }
            for n in nodes
        ],
        "waiting_for_ranks": [],
    }
