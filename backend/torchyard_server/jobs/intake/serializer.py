"""JobSpec checking (DESIGN.md section 4): every field checked, errors keyed by field, and the
accepted spec normalized to one canonical shape (DistroML's `workers` form included), which
jobspec.JobSpec reads. The shape alone: no database, no user. The sections' rules are in
sections.py; what the spec names is then checked against the world and its submitter, and its
secrets sealed, by control/admission.py, before anything is done with it."""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from rest_framework import serializers
from torchyard import recipe_params
from torchyard.sdk.choices import DATASETS
from torchyard.sdk.scaling import adjust_hyperparameters

from ...projects.models import DEFAULT_PROJECT
from ...rest.strict import StrictFields
from ..spec.recipes import DATASET_RECIPES, IN_PLACE_RECIPES, MEMORY_RECIPES, MODEL_RECIPES, builtin_recipes
from .queue_fields import PreemptionSerializer, PriorityField, TimeLimitField
from .sections import (
    CheckpointingSerializer,
    CodeSerializer,
    CompressionSerializer,
    DistributedSerializer,
    ElasticSerializer,
    FaultToleranceSerializer,
    FunctionSerializer,
    PlacementSerializer,
    ResourcesSerializer,
    RuntimeSerializer,
    ScalingSerializer,
    VolumeSerializer,
    refuse_nul_characters,
    validate_entrypoint,
    validate_env_names,
)

MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")



class JobSpecSerializer(StrictFields, serializers.Serializer):
    name = serializers.CharField(max_length=200)
    project = serializers.CharField(max_length=63, default=DEFAULT_PROJECT, help_text=(
        "the project the job belongs to; its submitter must be a member or admin of it"))
    entrypoint = serializers.CharField(max_length=500, required=False)
    module = serializers.RegexField(
        MODULE_NAME, max_length=200, required=False,
        help_text="run `python -m MODULE` from the bundle (as torchrun's -m) instead of an entrypoint script",
        error_messages={"invalid": "must be a dotted Python module name such as pkg.train."},
    )
    code = CodeSerializer(required=False)
    runtime = RuntimeSerializer(required=False)
    args = serializers.ListField(child=serializers.CharField(max_length=4096, allow_blank=True), default=list, max_length=256)
    env = serializers.DictField(child=serializers.CharField(max_length=8192, allow_blank=True), default=dict)
    secret_env = serializers.DictField(
        child=serializers.CharField(max_length=8192, trim_whitespace=False), required=False,
        help_text="variables given to the ranks like env, for API keys and passwords: stored encrypted, "
                  "never returned (the API shows {NAME: \"***\"}), masked as *** in the job's logs",
    )
    resources = ResourcesSerializer(required=False)
    placement = PlacementSerializer(required=False)
    distributed = DistributedSerializer(required=False)
    hyperparameters = serializers.DictField(default=dict, validators=[refuse_nul_characters])
    scaling = ScalingSerializer(required=False)
    checkpointing = CheckpointingSerializer(required=False)
    fault_tolerance = FaultToleranceSerializer(required=False)
    compression = CompressionSerializer(required=False)
    elastic = ElasticSerializer(required=False, help_text="how an elastic job (resources.nodes MIN:MAX) resizes")
    function = FunctionSerializer(required=False, help_text="a Python function run on every rank (torchyard.fn)")
    volumes = VolumeSerializer(many=True, required=False, max_length=16, help_text=(
        "volumes declared on the machines (torchyard agent --volume, or PATCH /api/machines/{id}): the job goes "
        "only to machines that have every one"))
    framework = serializers.ChoiceField(
        choices=["pytorch", "ray"], default="pytorch",
        help_text="pytorch; ray: a Ray cluster over the job's nodes (Ray from the job's requirements), the "
                  "entrypoint (or function) as its driver on node 0")
    model = serializers.CharField(max_length=100, required=False)
    priority = PriorityField(required=False, help_text=(
        "the job's place in the queue: low (-10), normal (0, the default), high (10) or an integer from -100 to "
        "100, higher first; at most the project's priority_ceiling (staff are not capped)"))
    time_limit = TimeLimitField(required=False, help_text=(
        "the most the job may run, from its start: seconds or a duration (90m, 2h, 1d); stopped when it is "
        "reached. A job with one may start ahead of the queue's first (backfill) when it ends before that one "
        "can start"))
    preemptible = serializers.BooleanField(required=False, help_text=(
        "true (the default): a job of higher priority, or a project reclaiming its quota, may preempt it (it "
        "checkpoints, yields and resumes later, losing nothing). false: never preempted, and it never borrows "
        "beyond its project's quota (it waits for room within it)"))
    preemption = PreemptionSerializer(required=False, help_text="how the job is preempted: its grace")
    dataset = serializers.CharField(max_length=100, required=False, help_text=(
        "what a built-in recipe trains on: " + "; ".join(f"{name}: {about}" for name, about in DATASETS.items())
        + ". Without a model or entrypoint it picks the recipe; a script of your own reads it from its config "
          "(sdk.datasets.selected)"))

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        distributed = data.get("distributed") if isinstance(data, dict) else None
        self._launcher_given = distributed.get("launcher") if isinstance(distributed, dict) else None
        value = super().to_internal_value(data)
        # Nested serializers with required=False leave absent sections out; fill their defaults.
        for section in ("resources", "placement", "distributed", "scaling", "checkpointing", "fault_tolerance",
                        "compression", "runtime"):
            if section not in value:
                value[section] = self.fields[section].run_validation({})
        return value

    def validate_entrypoint(self, value: str) -> str:
        return validate_entrypoint(value)

    def validate_env(self, value: dict[str, str]) -> dict[str, str]:
        return validate_env_names(value)

    def validate_volumes(self, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for key in ("name", "mount_path"):
            seen = [v[key] for v in value]
            twice = sorted({item for item in seen if seen.count(item) > 1})
            if twice:
                raise serializers.ValidationError(f"{key} {', '.join(twice)} given twice; each volume once.")
        return value

    def validate_secret_env(self, value: dict[str, str]) -> dict[str, str]:
        return validate_env_names(value)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        """What spans several sections."""
        attrs.setdefault("priority", 0)
        model = attrs.pop("model", None)
        unknown_model = None
        if model is not None:
            recipe = MODEL_RECIPES.get(model)
            if recipe is None:
                unknown_model = [f"unknown model {model!r}; known: {', '.join(sorted(MODEL_RECIPES))}."]
            elif attrs.get("entrypoint") not in (None, recipe):
                raise serializers.ValidationError({"model": ["give either model or entrypoint, not both."]})
            else:
                attrs["entrypoint"] = recipe
                attrs["model"] = model
        try:
            self._validate_dataset(attrs)
        except serializers.ValidationError as exc:
            # An unknown model and an unknown dataset (the Go scheduler's sample task's resnet50 on
            # imagenet) are said together.
            if unknown_model is not None:
                detail = exc.detail if isinstance(exc.detail, dict) else {"dataset": exc.detail}
                raise serializers.ValidationError({"model": unknown_model, **detail}) from exc
            raise
        if unknown_model is not None:
            raise serializers.ValidationError({"model": unknown_model})
        both = sorted(set(attrs.get("secret_env") or {}) & set(attrs["env"]))
        if both:
            raise serializers.ValidationError({"secret_env": [f"{', '.join(both)}: also in env; give it once."]})
        self._validate_launcher(attrs)
        self._validate_in_place(attrs)
        self._validate_memory(attrs)
        if attrs["distributed"]["launcher"] != "command" or attrs.get("code"):
            self._validate_code(attrs)
        self._validate_recipe_hyperparameters(attrs)
        resources = attrs["resources"]
        gpus = resources.get("gpus_per_worker", 0) if "workers" in resources else resources.get("gpus_per_node", 0)
        backend = attrs["distributed"]["backend"]
        if backend == "nccl" and not gpus:
            raise serializers.ValidationError({"distributed": {"backend": ["nccl needs gpus_per_node >= 1."]}})
        if backend in ("nccl", "auto") and "workers" not in resources and 0 < gpus < resources["procs_per_node"]:
            # NCCL refuses two ranks on one GPU: every process of a node needs a GPU of its own.
            raise serializers.ValidationError({"resources": {"procs_per_node": [
                f"{resources['procs_per_node']} processes per node need {resources['procs_per_node']} GPUs under "
                f"nccl; gpus_per_node is {gpus}."]}})
        store = attrs["checkpointing"]["store"]
        configured = settings.STORAGE_URL.split(":", 1)[0]
        if store.startswith("volume:"):
            if store.split(":", 1)[1] not in {v["name"] for v in attrs.get("volumes") or []}:
                raise serializers.ValidationError({"checkpointing": {"store": [
                    f"{store}: not a volume of the job; add it to volumes."]}})
        elif store != "default" and {"local": "file", "s3": "s3"}[store] != configured:
            raise serializers.ValidationError({"checkpointing": {"store": [
                f"this server keeps checkpoints in {settings.STORAGE_URL} (TORCHYARD_STORAGE_URL); "
                f"use store 'default' or ask for a {store} store there."]}})
        world_size = resources.get("workers") or resources["nodes"] * resources["procs_per_node"]
        if "min_nodes" not in resources:
            try:
                adjust_hyperparameters(attrs["hyperparameters"], attrs["scaling"], world_size)
            except ValueError as exc:
                raise serializers.ValidationError({"hyperparameters": [str(exc)]}) from exc
            return attrs
        self._check_elastic_range(attrs, resources)
        return attrs

    @staticmethod
    def _check_elastic_range(attrs: dict[str, Any], resources: dict[str, Any]) -> None:
        """An elastic job may run at any node count of its range: each must take the hyperparameters.
        A built-in recipe given no batch_size under keep_global_batch gets its default rounded up to
        a multiple every size of the range divides (recipe_params.elastic_batch), so it runs elastic
        as it is; a batch_size the job gives is its own, and a size that cannot take it is refused
        naming the sizes that can."""
        counts = range(resources["min_nodes"], resources["nodes"] + 1)
        procs = resources["procs_per_node"]
        hyperparameters = attrs["hyperparameters"]
        if (attrs["scaling"].get("mode") or "none") == "keep_global_batch" and "batch_size" not in hyperparameters:
            batch = recipe_params.elastic_batch(attrs.get("entrypoint"), [n * procs for n in counts])
            if batch is not None:
                attrs["hyperparameters"] = hyperparameters = {**hyperparameters, "batch_size": batch}
        failures = {}
        for nodes in counts:
            try:
                adjust_hyperparameters(hyperparameters, attrs["scaling"], nodes * procs)
            except ValueError as exc:
                failures[nodes] = str(exc)
        if failures:
            nodes, reason = next(iter(failures.items()))
            holding = [str(n) for n in counts if n not in failures]
            sizes = (f"the range's sizes that take it: {', '.join(holding)} node(s)" if holding
                     else "no size of the range takes it")
            raise serializers.ValidationError({"hyperparameters": [
                f"with {nodes} nodes of the range {counts.start}:{counts.stop - 1}: {reason}; {sizes}"]})

    def _validate_dataset(self, attrs: dict[str, Any]) -> None:
        """A known dataset; a built-in recipe must train on it, and picks the first recipe that does when
        the spec names no code to run. A job's own code gets the name in its config."""
        name = attrs.get("dataset")
        if name is None:
            return
        if name not in DATASETS:
            raise serializers.ValidationError({"dataset": [
                f"unknown dataset {name!r}; built-in datasets: {', '.join(DATASETS)}."]})
        if attrs.get("code") or attrs.get("module") or "function" in attrs:
            return
        recipes = DATASET_RECIPES[name]
        entrypoint = attrs.get("entrypoint")
        if entrypoint is None and attrs["distributed"].get("launcher") != "command":
            attrs["entrypoint"] = recipes[0]
        elif entrypoint in builtin_recipes() and entrypoint not in recipes:
            trains_on = [other for other, where in DATASET_RECIPES.items() if entrypoint in where]
            what = f"trains on {' or '.join(trains_on)}, not {name}" if trains_on else "takes no dataset"
            raise serializers.ValidationError({"dataset": [
                f"{entrypoint} {what}; {name} is trained by {', '.join(recipes)}."]})

    @staticmethod
    def _validate_recipe_hyperparameters(attrs: dict[str, Any]) -> None:
        """A built-in recipe reads the hyperparameters torchyard.recipe_params lists for it: any other
        name, or a value it cannot take, is refused by name rather than run and ignored. A job's own
        code reads whatever it likes (sdk.config())."""
        entrypoint = attrs.get("entrypoint")
        if attrs.get("code") or "function" in attrs or entrypoint not in builtin_recipes():
            return
        found = recipe_params.problems(entrypoint, attrs["hyperparameters"], args=attrs["args"],
                                       dataset=attrs.get("dataset"))
        if found:
            raise serializers.ValidationError({"hyperparameters": {key: [why] for key, why in found.items()}})

    @staticmethod
    def _validate_in_place(attrs: dict[str, Any]) -> None:  # noqa: C901 - one refusal per case
        """fault_tolerance.mode in_place replaces one rank of a data-parallel world of fixed size: the warm
        launcher forks the replacement (torchrun restarts every worker of a node), and the survivors hand
        it a replica of their state. What cannot be replaced so is refused, saying what to use."""
        if attrs["fault_tolerance"]["mode"] != "in_place":
            return
        distributed, refusals = attrs["distributed"], {}
        if distributed["launcher"] != "torchrun" or "function" in attrs:
            what = "a function" if "function" in attrs else f"launcher {distributed['launcher']}"
            refusals["mode"] = [f"in_place replaces a rank that torchrun's place launched; {what} restarts the "
                                "attempt (mode restart)."]
        elif distributed.get("warm") is False:
            refusals["mode"] = ["in_place forks the replacement rank from the machine's warm pool: leave "
                                "distributed.warm true (the default), or use mode restart."]
        elif "min_nodes" in attrs["resources"]:
            refusals["mode"] = ["an elastic job (nodes MIN:MAX) goes on with fewer nodes when it loses one; "
                                "in_place is for a fixed world size."]
        elif attrs["compression"]["enabled"]:
            refusals["mode"] = ["in_place averages gradients through torchft's own DDP, which takes no "
                                "compression hook: disable compression, or use mode restart."]
        elif (entrypoint := attrs.get("entrypoint")) in builtin_recipes() and entrypoint not in IN_PLACE_RECIPES \
                and not attrs.get("code"):
            refusals["mode"] = [f"{entrypoint} trains without sdk.resilient, so its ranks cannot be replaced alone; "
                                f"in_place runs {', '.join(IN_PLACE_RECIPES)} (or your script through "
                                "sdk.resilient), or use mode restart."]
        if refusals:
            raise serializers.ValidationError({"fault_tolerance": refusals})

    @staticmethod
    def _validate_memory(attrs: dict[str, Any]) -> None:
        """checkpointing.memory copies a rank's whole state (DDP's) to other machines of the job: a
        sharded built-in recipe, or more replicas than the job has other nodes, is refused."""
        memory = attrs["checkpointing"].get("memory")
        if memory is None:
            return
        resources = attrs["resources"]
        fewest = resources.get("min_nodes") or resources.get("nodes")
        if fewest is not None and memory["replicas"] > fewest - 1:
            raise serializers.ValidationError({"checkpointing": {"memory": {"replicas": [
                f"{memory['replicas']} cop{'y' if memory['replicas'] == 1 else 'ies'} on other machines of the job, "
                f"which runs on {fewest} node{'s' if fewest > 1 else ''}: give it more nodes, or fewer replicas "
                "(0 keeps each checkpoint in its own machine's memory only)."]}}})
        entrypoint = attrs.get("entrypoint")
        if entrypoint in builtin_recipes() and entrypoint not in MEMORY_RECIPES and not attrs.get("code"):
            raise serializers.ValidationError({"checkpointing": {"memory": [
                f"{entrypoint} shards its state (torch.distributed.checkpoint), which is saved to disk/S3 only; "
                f"memory checkpoints copy a whole replica of the state: {', '.join(MEMORY_RECIPES)}, or your "
                "own data-parallel script."]}})

    def _validate_launcher(self, attrs: dict[str, Any]) -> None:
        """launcher none runs one process per node; launcher command runs its command, nothing else;
        framework ray is launcher ray (and the other way round), no other."""
        self._validate_ray(attrs)
        launcher, resources = attrs["distributed"]["launcher"], attrs["resources"]
        if launcher == "none" and "workers" not in resources and resources["procs_per_node"] != 1:
            raise serializers.ValidationError({"resources": {"procs_per_node": [
                f"launcher none runs one process per node: procs_per_node must be 1 (is {resources['procs_per_node']}); "
                "use launcher torchrun or command for more."]}})
        if launcher == "accelerate":
            for key in ("module", "function"):
                if attrs.get(key):
                    raise serializers.ValidationError({key: [
                        "launcher accelerate runs an entrypoint script through the plugin harness; give entrypoint, "
                        f"not {key}."]})
        if launcher == "command":
            for key in ("entrypoint", "module", "model"):
                if attrs.get(key):
                    raise serializers.ValidationError({key: [
                        f"launcher command runs distributed.command; give no {key}."]})
            if not attrs.get("code") and attrs.get("runtime", {}).get("pip"):
                raise serializers.ValidationError({"runtime": {"pip": [
                    "packages are installed with the job's code: give code.bundle too."]}})

    def _validate_ray(self, attrs: dict[str, Any]) -> None:
        given = getattr(self, "_launcher_given", None)
        if attrs.get("framework") == "ray" or given == "ray":
            if given not in (None, "ray"):
                raise serializers.ValidationError({"distributed": {"launcher": [
                    f"a Ray job (framework ray) runs Ray's own launcher; give no launcher {given!r}."]}})
            attrs["framework"] = "ray"
            attrs["distributed"]["launcher"] = "ray"
        elif attrs["fault_tolerance"].get("ray_worker_loss"):
            raise serializers.ValidationError({"fault_tolerance": {"ray_worker_loss": [
                "only a Ray job (framework: ray) has Ray workers to lose."]}})

    def _validate_code(self, attrs: dict[str, Any]) -> None:
        """A job runs a built-in recipe, or an entrypoint script or module of the user's own bundle,
        or a Python function (its pickle a bundle too) with the user's bundle as its project."""
        code, module, entrypoint = attrs.get("code"), attrs.get("module"), attrs.get("entrypoint")
        if "function" in attrs:
            self._validate_function(attrs)
            return
        if module and entrypoint:
            raise serializers.ValidationError({"module": ["give either module or entrypoint, not both."]})
        if not code:
            if module:
                raise serializers.ValidationError({"module": ["a module runs from the job's code: give code.bundle too."]})
            if attrs.get("runtime", {}).get("pip"):
                raise serializers.ValidationError({"runtime": {"pip": ["the built-in recipes take no extra packages."]}})
            if not entrypoint:
                raise serializers.ValidationError({"entrypoint": ["this field is required (or give a built-in model)."]})
            if entrypoint not in builtin_recipes():
                raise serializers.ValidationError({"entrypoint": [
                    f"unknown recipe {entrypoint!r}; built-in recipes: {', '.join(builtin_recipes())} "
                    "(or upload your own code and give code.bundle)."]})
            return
        # Whose bundle it is, and that the entrypoint is a file of it: control/admission.py.
        if not (entrypoint or module or attrs["distributed"]["launcher"] == "command"):
            raise serializers.ValidationError({"entrypoint": ["give the script to run (a path in the bundle) or a module."]})

    def _validate_function(self, attrs: dict[str, Any]) -> None:
        code = attrs.get("code")
        clashing = [key for key in ("entrypoint", "module", "model") if attrs.get(key)]
        if clashing:
            raise serializers.ValidationError({key: ["a function job runs its function; give no "
                                                     f"{key}."] for key in clashing})
        if not code:
            raise serializers.ValidationError({"code": ["a function runs in its project: give code.bundle too."]})
        # Whose bundles they are, and that the payload holds the pickle: control/admission.py.
