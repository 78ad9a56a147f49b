"""TransformerLab's payloads: its DistributedTrainingConfig (a job as the TransformerLab browser described
it) translated to a JobSpec and back, and its DistributedJobStatus."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from django.db.models import Q
from rest_framework import serializers

from ...jobs.control.admission import admit_spec
from ...jobs.intake.serializer import JobSpecSerializer
from ...jobs.models import Job
from ...jobs.spec.jobspec import JobSpec
from ...machines.models import Machine
from ...plugins.services import plugin_job_parts, plugin_of_spec
from ...rest.strict import StrictFields

# How a TransformerLab body chooses machines, for a key that asks for a placement some other way.
PLACEMENT = ("TransformerLab's body chooses machines with machine_selection: auto (Torchyard's spread policy, the "
             "least loaded machines first) or manual (the machines of selected_machines, rank 0 on the first). For "
             "another placement policy (pack, simple, balanced), submit a JobSpec to POST /api/jobs with "
             "placement.policy.")
WHOLE_JOB_REFUSED = {
    "placement": PLACEMENT, "policy": PLACEMENT, "placement_policy": PLACEMENT,
    "master_addr": ("Torchyard picks a whole job's master itself: rank 0's machine and a free port on it, which the "
                    "job's status answers; leave master_addr and master_port out (machine_selection manual, with a "
                    "machine first in selected_machines, makes that machine rank 0's)."),
    "world_size": ("a whole job's size is resource_requirements.num_machines (machines) and procs_per_machine "
                   "(processes on each); world_size belongs to a per-rank dispatch, with rank and target_machine."),
    "job_id": ("this route names the job itself (its answer's job_id or id); to submit a job under your own job_id, "
               "send this body with it to POST /api/network/distributed/dispatch."),
}
WHOLE_JOB_REFUSED["master_port"] = WHOLE_JOB_REFUSED["master_addr"]


# StrictFields (unknown keys refused, never dropped), with a sentence instead of "unknown field." for
# the keys of `refused` a TransformerLab user may send meaning something this body says otherwise.
# No docstring: the API schema would show it as the description of every serializer that has none.
class SeedStrict(StrictFields):

    refused: ClassVar[dict[str, str]] = {}

    def to_internal_value(self, data: Any) -> Any:
        try:
            return super().to_internal_value(data)
        except serializers.ValidationError as exc:
            if isinstance(exc.detail, dict) and isinstance(data, Mapping):
                said = {key: [sentence] for key, sentence in self.refused.items()
                        if key in data and key in exc.detail and key not in self.fields}  # type: ignore[attr-defined]
                if said:
                    raise serializers.ValidationError({**exc.detail, **said}) from exc
            raise


class ResourceRequirements(StrictFields, serializers.Serializer):
    num_machines = serializers.IntegerField(min_value=1, max_value=256, default=1)
    gpus_per_machine = serializers.IntegerField(min_value=0, max_value=64, default=0)
    min_gpu_memory = serializers.IntegerField(min_value=0, default=0, help_text="MB per GPU")
    procs_per_machine = serializers.IntegerField(min_value=1, max_value=64, default=1, help_text="Torchyard's")


class DistributedTrainingConfig(SeedStrict, serializers.Serializer):
    """TransformerLab's DistributedTrainingConfig; `plugin_name` is a registered plugin (`GET /api/plugins`)
    or a built-in recipe (`mlp_ddp` or its path). Machines: `machine_selection` auto (the least loaded
    first, Torchyard's spread policy) or manual (`selected_machines`, in rank order)."""

    refused = WHOLE_JOB_REFUSED

    plugin_name = serializers.CharField(max_length=200, help_text="a plugin of GET /api/plugins (registered or built-in)")
    config = serializers.DictField(default=dict, help_text="the hyperparameters")
    resource_requirements = ResourceRequirements(default=dict)
    machine_selection = serializers.ChoiceField(choices=["auto", "manual"], default="auto", help_text=(
        "auto: Torchyard chooses the machines, the least loaded first (its spread policy); manual: the machines "
        "of selected_machines"))
    selected_machines = serializers.ListField(child=serializers.CharField(max_length=100), default=list, help_text=(
        "with machine_selection manual: the job's machines (names, ids or hosts) in rank order, rank 0's (the "
        "master) first; num_machines, when given, must count them"))
    args = serializers.ListField(child=serializers.CharField(max_length=4096), default=list, help_text="Torchyard's")
    project = serializers.CharField(max_length=63, default="default", help_text="Torchyard's: the job's project")

    def validate(self, attrs):
        selected, errors = attrs["selected_machines"], {}
        requirements = attrs["resource_requirements"] or default_requirements()
        raw = self.initial_data.get("resource_requirements") if isinstance(self.initial_data, Mapping) else None
        counted = isinstance(raw, Mapping) and "num_machines" in raw
        if attrs["machine_selection"] == "auto":
            if selected:
                errors["selected_machines"] = [
                    "machine_selection is auto: Torchyard chooses the machines (the least loaded first). Set "
                    "machine_selection to manual to run on these, or leave selected_machines out."]
        elif not selected:
            errors["selected_machines"] = ["machine_selection manual runs on the machines listed here: name them "
                                           "(rank 0's first), or set machine_selection to auto."]
        elif twice := sorted({m for m in selected if selected.count(m) > 1}):
            errors["selected_machines"] = [f"{', '.join(twice)} selected more than once: a machine takes one rank "
                                           "of a job (procs_per_machine runs more processes on it)."]
        elif counted and requirements["num_machines"] != len(selected):
            errors["resource_requirements"] = {"num_machines": [
                f"says {requirements['num_machines']}, but selected_machines names {len(selected)} machines: select "
                "as many, or leave num_machines out (it is then the number selected)."]}
        elif not counted:
            attrs["resource_requirements"] = {**requirements, "num_machines": len(selected)}
        if errors:
            raise serializers.ValidationError(errors)
        return attrs


def default_requirements() -> dict[str, Any]:
    defaults = ResourceRequirements(data={})
    defaults.is_valid(raise_exception=True)
    return dict(defaults.validated_data)


def selected_machine_names(selected: list[str], *, known_only: bool) -> list[str]:
    """selected_machines as the planner takes them, by name: each entry a machine's name, id or host
    (TransformerLab names machines by id or address). An entry that names no machine is a field error
    when `known_only` (the job is placed now), else kept as it is (a task may name a machine that
    joins later; the planner refuses it when the task is queued)."""
    names, errors = [], []
    for entry in selected:
        named = Q(name=entry) | Q(host=entry)
        if entry.isascii() and entry.isdigit() and len(entry) <= 18:  # beyond a bigint no machine has that id
            named |= Q(pk=int(entry))
        found = list(Machine.objects.filter(named).values_list("name", flat=True)[:3])
        if len(found) == 1:
            names.append(found[0])
        elif found and entry in found:
            names.append(entry)
        elif found:
            errors.append(f"several machines answer to {entry} ({', '.join(sorted(found))}): give the machine's name.")
        elif known_only:
            errors.append(f"no machine has the name, id or host {entry!r}.")
        else:
            names.append(entry)
    if not errors and len(set(names)) < len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        errors.append(f"{', '.join(twice)} selected more than once (by name, id or host): a machine takes one rank of a job.")
    if errors:
        raise serializers.ValidationError({"selected_machines": errors})
    return names


def spec_from_seed(data: dict[str, Any], request, *, name: str | None = None, known_only: bool = False) -> dict[str, Any]:
    """Translate a validated DistributedTrainingConfig into a JobSpec and validate it like any other.
    A registered plugin runs its bundle's entrypoint through the harness (launcher accelerate), its
    default config under the request's `config`. `known_only`: selected_machines must name machines
    that exist (see selected_machine_names)."""
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
        # machine_selection auto: the least loaded machines first, the order suggest_machines answers in.
        "placement": {"policy": "spread", "machines": selected_machine_names(data["selected_machines"], known_only=known_only)
                      if data["machine_selection"] == "manual" else []},
    }
    validated = JobSpecSerializer(data=spec)
    validated.is_valid(raise_exception=True)
    return admit_spec(validated.validated_data, user=request.user)


def seed_body(request, serializer: type[DistributedTrainingConfig] = DistributedTrainingConfig,
              name: str | None = None) -> dict[str, Any]:
    """The JobSpec of a request whose body is a DistributedTrainingConfig (or `serializer`, one of its
    kind), to place now: named `name` when given."""
    body = serializer(data=request.data)
    body.is_valid(raise_exception=True)
    return spec_from_seed(body.validated_data, request, name=name, known_only=True)


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
