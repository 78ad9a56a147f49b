"""JobSpec validation (DESIGN.md section 4): every field checked, errors keyed by field, and the
accepted spec normalized to one canonical shape (DistroML's `workers` form included)."""

from __future__ import annotations

import ast
import fnmatch
import posixpath
import re
from pathlib import Path
from typing import Any

import torchyard
from django.conf import settings
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from torchyard import protocol
from torchyard.sdk.choices import DATASETS, HOOK_SETTINGS, HOOKS, MIN_START_ITER
from torchyard.sdk.scaling import adjust_hyperparameters

from ..bundles.services import bundle_for_user
from ..projects.models import DEFAULT_PROJECT
from ..projects.permissions import projects_visible_to, require_submit
from ..projects.selectors import project_by_name
from . import policies as placement_policies
from . import secretbox
from .registries import shared_bundle_for
from .spec_queue import PreemptionSerializer, PriorityField, TimeLimitField, check_priority_ceiling

RECIPES_DIR = Path(torchyard.__file__).resolve().parent / "examples"
# What a function's payload bundle must hold (workers/torchyard/function_results.py).
FUNCTION_PAYLOAD_FILE = "function.pkl"
# DistroML's `model` names, mapped to the built-in recipe that trains them.
MODEL_RECIPES = {"mlp": "examples/mlp_ddp.py", "char_gpt": "examples/char_gpt.py", "transformer": "examples/char_gpt.py"}
# DistroML's `dataset` names (torchyard.sdk.datasets), each with the built-in recipes that train on
# it; the first is the one a spec without a model or entrypoint runs.
DATASET_RECIPES = {"synthetic": ("examples/mlp_ddp.py", "examples/mlp_fsdp.py"), "digits": ("examples/mlp_ddp.py",),
                   "python-source": ("examples/char_gpt.py",)}
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Set by torchrun and Torchyard for every rank; a user value would silently break the launch.
# NODE_RANK and NNODES: every launcher's node identity (distributed.launcher none and command).
RESERVED_ENV = {"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                "NODE_RANK", "NNODES"}
# Refused unless staff allow them (TORCHYARD_ALLOWED_JOB_ENV): variables that reach past the job's
# own script. They act on every process of the node (torchrun, Torchyard's SDK, pip's helpers), and
# make them load code or data from paths on the machine outside the job's code and environment
# (another job's /tmp, a shared folder), where a reader of the spec sees no code at all; a job runs
# its own code anyway, from its bundle. Names match upper-cased, `*` as a prefix. PYTHONPATH stays
# allowed: the job's code and the SDK come before it (supervisor/argv.py build_env).
REFUSED_ENV = {
    "LD_*": "is read by the dynamic loader (LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT load libraries into every process)",
    "DYLD_*": "is read by the macOS dynamic loader",
    "GCONV_PATH": "makes glibc load iconv modules from a path",
    "GLIBC_TUNABLES": "changes glibc's allocator and loader in every process",
    "LOCPATH": "makes glibc load locale data from a path",
    "PYTHONSTARTUP": "runs a file in every interactive Python",
    "PYTHONINSPECT": "leaves every Python of the job at an interactive prompt after its script",
    "PYTHONHOME": "replaces the Python standard library",
    "PYTHONPLATLIBDIR": "moves the Python standard library",
    "PYTHONEXECUTABLE": "changes the interpreter Python reports (sys.executable)",
    "PYTHONUSERBASE": "loads user site-packages (whose .pth files run code) from a path",
    "PYTHONPYCACHEPREFIX": "writes bytecode outside the job's folders",
    "TORCHYARD_*": "is Torchyard's own (it tells the job's processes apart and the SDK where to report)",
    "TORCHELASTIC_*": "is torchrun's own (it identifies and configures its workers)",
}
MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
TOP_LEVEL_KEYS = {
    "name", "entrypoint", "module", "code", "runtime", "args", "env", "resources", "placement", "distributed", "hyperparameters",
    "scaling", "checkpointing", "fault_tolerance", "compression", "framework", "model", "dataset", "project",
    "secret_env", "volumes", "function", "elastic", "priority", "time_limit", "preemptible", "preemption",
}


def builtin_recipes() -> list[str]:
    return sorted(f"examples/{p.name}" for p in RECIPES_DIR.glob("*.py") if not p.name.startswith("_"))


def recipe_catalog() -> list[dict[str, str]]:
    """The built-in recipes with the first paragraph of their docstring, read without importing them."""
    catalog = []
    for entrypoint in builtin_recipes():
        source = (RECIPES_DIR / posixpath.basename(entrypoint)).read_text(encoding="utf-8")
        docstring = ast.get_docstring(ast.parse(source)) or ""
        # Plain text for the dashboard and the CLI: docstrings mark code up as ``name``.
        summary = " ".join(docstring.split("\n\n", 1)[0].split()).replace("``", "")
        catalog.append({"entrypoint": entrypoint, "summary": summary})
    return catalog


def validate_entrypoint(value: str) -> str:
    """A relative path that stays inside the job's code (its bundle, or the built-in recipes)."""
    if value.startswith("/") or "\\" in value or "\x00" in value:
        raise serializers.ValidationError("must be a relative path inside the job's code (no leading '/').")
    normalized = posixpath.normpath(value)
    if normalized.startswith("..") or "/../" in f"/{value}/":
        raise serializers.ValidationError("must stay inside the job's code directory ('..' is not allowed).")
    return normalized


def refuse_nul_characters(value: Any) -> None:
    """Free-form JSON (hyperparameters) is stored as PostgreSQL jsonb, whose text cannot hold NUL."""
    if isinstance(value, str) and "\x00" in value:
        raise serializers.ValidationError("text may not contain NUL characters (\\u0000).")
    if isinstance(value, dict):
        for key, item in value.items():
            refuse_nul_characters(key)
            refuse_nul_characters(item)
    elif isinstance(value, list):
        for item in value:
            refuse_nul_characters(item)


class CodeSerializer(serializers.Serializer):
    bundle = serializers.RegexField(
        r"^[0-9a-f]{64}$", help_text="sha256 of a bundle uploaded with PUT /api/bundles/{sha256}",
        error_messages={"invalid": "must be the 64 hex digit sha256 of an uploaded bundle."},
    )


class RuntimeSerializer(serializers.Serializer):
    pip = serializers.ListField(
        child=serializers.CharField(max_length=500), default=list, max_length=200,
        help_text="requirements installed (with the bundle's requirements.txt) into a cached virtualenv per node",
    )

    def validate_pip(self, value: list[str]) -> list[str]:
        for requirement in value:
            if requirement.strip().startswith("-") or "\n" in requirement:
                raise serializers.ValidationError(
                    f"{requirement!r}: pip options are not allowed here; put them in the bundle's requirements.txt."
                )
        return [r.strip() for r in value]


MAX_NODES = 256
MAX_SPARES = 8  # hot spares a job may hold


@extend_schema_field({"oneOf": [{"type": "integer", "minimum": 1, "maximum": MAX_NODES},
                                {"type": "string", "pattern": r"^\s*[0-9]+\s*(:\s*[0-9]+\s*)?$"}]})
class NodesField(serializers.Field):
    """`resources.nodes`: a node count (4), or an elastic range MIN:MAX as torchrun's --nnodes
    ("2:4"). Internally (int, None) or (MIN, MAX); ResourcesSerializer stores the range as
    {"nodes": MAX, "min_nodes": MIN}."""

    def to_internal_value(self, data: Any) -> tuple[int, int | None]:
        if isinstance(data, bool):
            raise serializers.ValidationError("a node count (4) or a range MIN:MAX (\"2:4\").")
        if isinstance(data, int):
            return self._count(data), None
        if isinstance(data, str) and re.fullmatch(r"\s*[0-9]{1,4}\s*(:\s*[0-9]{1,4}\s*)?", data):
            low, _, high = data.partition(":")
            if not high:
                return self._count(int(low)), None
            low_n, high_n = int(low), int(high)
            if low_n < 1:
                raise serializers.ValidationError(f"{data.strip()}: MIN must be at least 1.")
            if low_n > high_n:
                raise serializers.ValidationError(f"{data.strip()}: MIN ({low_n}) exceeds MAX ({high_n}).")
            return low_n, self._count(high_n)
        raise serializers.ValidationError("a node count (4) or a range MIN:MAX (\"2:4\").")

    @staticmethod
    def _count(value: int) -> int:
        if not 1 <= value <= MAX_NODES:
            raise serializers.ValidationError(f"must be between 1 and {MAX_NODES} (is {value}).")
        return value

    def to_representation(self, value: Any) -> Any:
        return value


class ResourcesSerializer(serializers.Serializer):
    nodes = NodesField(required=False, help_text=(
        "machines (nodes) of the job: a count, or an elastic range MIN:MAX (\"2:4\") that the planner fills "
        "with as many as fit, at least MIN; stored as nodes: MAX, min_nodes: MIN"))
    min_nodes = serializers.IntegerField(
        min_value=1, max_value=MAX_NODES, required=False,
        help_text="elastic jobs: the fewest nodes the job runs on (nodes is then the most); same as nodes \"MIN:MAX\"")
    procs_per_node = serializers.IntegerField(min_value=1, max_value=64, required=False)
    gpus_per_node = serializers.IntegerField(min_value=0, max_value=64, default=0)
    min_gpu_memory = serializers.IntegerField(min_value=0, default=0, help_text="MB per GPU")
    # DistroML form: world size in worker processes, spread by the planner.
    workers = serializers.IntegerField(min_value=1, max_value=4096, required=False)
    gpus_per_worker = serializers.IntegerField(min_value=0, max_value=8, required=False)
    # What each node needs of its machine beyond its processes (torchyard.Compute's cpus and memory):
    # the planner skips a machine without that many cores (free of other jobs) or that much free memory.
    cpus_per_node = serializers.IntegerField(min_value=1, max_value=4096, required=False,
                                             help_text="CPU cores each node needs (default: one per process)")
    memory_per_node = serializers.IntegerField(min_value=0, max_value=1 << 50, required=False,
                                               help_text="bytes of free memory each node needs on its machine")
    spares = serializers.IntegerField(
        min_value=0, max_value=MAX_SPARES, required=False,
        help_text="hot spares: extra machines held for the job, their caches and warm pools prepared with its code; "
                  "a lost machine is replaced by one without re-planning the others")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs.get("spares") and ("min_nodes" in attrs or (attrs.get("nodes") or (0, None))[1] is not None):
            raise serializers.ValidationError({"spares": [
                "an elastic job (nodes MIN:MAX) goes on with fewer nodes when it loses one; spares are for a fixed count."]})
        if "workers" in attrs and ("nodes" in attrs or "procs_per_node" in attrs):
            raise serializers.ValidationError(
                {"workers": ["give either workers (world size) or nodes + procs_per_node, not both."]}
            )
        if "workers" in attrs and "min_nodes" in attrs:
            raise serializers.ValidationError({"min_nodes": ["an elastic range needs nodes + procs_per_node, not workers."]})
        if "nodes" in attrs:
            low, high = attrs["nodes"]
            if high is None:
                attrs["nodes"] = low
            else:
                if "min_nodes" in attrs and attrs["min_nodes"] != low:
                    raise serializers.ValidationError({"min_nodes": ["give the range once: nodes \"MIN:MAX\" or min_nodes."]})
                attrs["nodes"], attrs["min_nodes"] = high, low
        if "workers" not in attrs:
            attrs.setdefault("nodes", 1)
            attrs.setdefault("procs_per_node", 1)
            if "min_nodes" in attrs:
                if attrs["min_nodes"] > attrs["nodes"]:
                    raise serializers.ValidationError({"nodes": [
                        f"min_nodes ({attrs['min_nodes']}) exceeds nodes ({attrs['nodes']})."]})
                if attrs["min_nodes"] == attrs["nodes"]:
                    del attrs["min_nodes"]  # a range of one count is that count
        return attrs


class ElasticSerializer(serializers.Serializer):
    min_interval = serializers.FloatField(
        min_value=0, max_value=7 * 24 * 3600, default=300,
        help_text="elastic jobs (resources.nodes MIN:MAX): the fewest seconds between two resizes; a job "
                  "running below MAX grows at its first checkpoint commit after that long")


class PlacementSerializer(serializers.Serializer):
    policy = serializers.CharField(
        max_length=100, default=placement_policies.default_policy,
        help_text="the server's default policy (pack unless TORCHYARD_PLACEMENT_POLICY says otherwise); pack: least waste, the machines a node fits most tightly; spread: the least loaded first; "
                  "simple (seed 004): fewest free GPUs of at least min_gpu_memory left after placing, then least "
                  "GPU memory beyond the asked; balanced (seed 004): fewest active tasks and most free GPUs; or a policy "
                  "installed by the entry point group torchyard.placement_policies")
    machines = serializers.ListField(child=serializers.CharField(max_length=100), default=list, max_length=256,
                                     help_text="manual placement: these machines, in this order (the first is the master)")
    oversubscribe = serializers.BooleanField(
        default=False, help_text="CPU jobs: share a machine past its core count with other jobs")
    labels = serializers.DictField(
        child=serializers.CharField(max_length=200), required=False,
        help_text="only machines whose labels hold every one of these key: value pairs")

    def validate_policy(self, value: str) -> str:
        names = placement_policies.policy_names()
        if value not in names:
            raise serializers.ValidationError(f"unknown placement policy {value!r}; choose one of: {', '.join(names)}.")
        return value

    def validate_labels(self, value: dict[str, str]) -> dict[str, str]:
        if len(value) > 32 or any(len(key) > 100 or not key for key in value):
            raise serializers.ValidationError("at most 32 labels, each key 1 to 100 characters.")
        return value


class ArgvItemField(serializers.CharField):
    """One item of an argv: a JSON string, never a number or anything else turned into one."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class DistributedSerializer(serializers.Serializer):
    backend = serializers.ChoiceField(choices=["auto", "gloo", "nccl"], default="auto")
    launcher = serializers.ChoiceField(
        choices=["torchrun", "none", "command", "ray", "accelerate"], default="torchrun",
        help_text="torchrun: the entrypoint under torchrun, procs_per_node ranks per node; none: the entrypoint once "
                  "per node as a plain process; command: `command` once per node; ray (what framework ray "
                  "chooses): a Ray head on node 0, Ray workers on the others, the entrypoint as the driver on the "
                  "head; accelerate (what a registered plugin runs with): `accelerate launch` per node running the "
                  "entrypoint through the plugin harness (torchyard.harness), an `accelerator` in its __main__. Every "
                  "one gets NODE_RANK, NNODES, MASTER_ADDR, MASTER_PORT and TORCHYARD_PEERS")
    command = serializers.ListField(
        child=ArgvItemField(max_length=4096, allow_blank=True, trim_whitespace=False),
        min_length=1, max_length=256, required=False,
        help_text="launcher command: the argv run once per node (never through a shell); ${NODE_RANK}, ${NNODES}, "
                  "${MASTER_ADDR}, ${MASTER_PORT}, ${NPROC_PER_NODE} and ${WORLD_SIZE} in its items are replaced, "
                  "and a first item python or python3 is the node's training Python")
    warm = serializers.BooleanField(
        default=True,
        help_text="launcher torchrun: fork each node's ranks from its machine's warm pool (a Python that has "
                  "already imported torch; the node's log says when there is none and it starts cold); false: "
                  "always a cold torchrun")
    strategy = serializers.ChoiceField(
        choices=["data_parallel"], default="data_parallel",
        error_messages={"invalid_choice": "only data_parallel is supported ({input!r} is not)."},
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        command = attrs.get("command")
        if attrs["launcher"] == "command":
            if not command or not command[0].strip():
                raise serializers.ValidationError({"command": [
                    "launcher command needs command: the argv to run once per node, such as "
                    "[\"python\", \"-m\", \"torch.distributed.run\", ...]."]})
        elif command is not None:
            raise serializers.ValidationError({"command": [
                f"only launcher command runs a command (launcher is {attrs['launcher']})."]})
        return attrs


class ScalingSerializer(serializers.Serializer):
    mode = serializers.ChoiceField(choices=["keep_global_batch", "scale_global_batch", "none"], default="keep_global_batch")
    lr_rule = serializers.ChoiceField(choices=["linear", "sqrt"], default="linear")
    warmup_steps = serializers.IntegerField(min_value=0, default=0)


class VolumeSerializer(serializers.Serializer):
    """A named host path the job's machines declare (DESIGN.md section 12); the planner places the
    job only where every one is, and the node sees it without mounting (supervisor/volumes.py)."""

    name = serializers.RegexField(protocol.VOLUME_NAME_PATTERN, max_length=63, error_messages={
        "invalid": "lowercase letters, digits, '.', '_' and '-' only, starting with a letter or digit."})
    mount_path = serializers.CharField(max_length=1024, required=False, help_text=(
        "relative (default: the name): a link in the job's working directory; absolute: only where it is the "
        "volume's own path on the machine (nothing is mounted). Every process also gets "
        "TORCHYARD_VOLUME_<NAME> (upper-cased, - and . as _): the path on its machine"))
    access_mode = serializers.ChoiceField(choices=["ReadWriteMany", "ReadWriteOnce"], default="ReadWriteMany", help_text=(
        "ReadWriteMany: one filesystem shared by every node, proven by the nodes' preflight; "
        "ReadWriteOnce: a directory per machine, not checked"))

    def validate_mount_path(self, value: str) -> str:
        if "\x00" in value or "\\" in value:
            raise serializers.ValidationError("a path without NUL characters or backslashes.")
        normalized = posixpath.normpath(value)
        if not value.startswith("/") and (normalized == "." or normalized.startswith("..")):
            raise serializers.ValidationError("a relative mount_path must stay inside the job's working directory.")
        return normalized

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs.setdefault("mount_path", attrs["name"])
        return attrs


class CheckpointingSerializer(serializers.Serializer):
    enabled = serializers.BooleanField(default=True)
    every_n_steps = serializers.IntegerField(min_value=1, default=200)
    store = serializers.RegexField(
        r"^(default|local|s3|volume:[a-z0-9][a-z0-9._-]{0,62})$", default="default", help_text=(
            "default, local or s3 (the server's store), or volume:NAME: a volume of the job, each node writing "
            "to its machine's path of it (file://<path>/torchyard-checkpoints/job-<id>)"),
        error_messages={"invalid": "default, local, s3 or volume:NAME (a volume of the job)."})
    keep = serializers.IntegerField(min_value=1, max_value=1000, default=3)


class FaultToleranceSerializer(serializers.Serializer):
    max_restarts = serializers.IntegerField(min_value=0, max_value=100, default=3)
    heartbeat_timeout = serializers.FloatField(min_value=2, max_value=3600, default=10)
    stall_timeout = serializers.FloatField(
        min_value=2, max_value=7 * 24 * 3600, required=False, allow_null=True, default=None,
        help_text="seconds a rank's step may stand still before it is reported stalled "
                  "(default: 10x the job's median step time, at least 60)")
    on_stall = serializers.ChoiceField(
        choices=["report", "recover"], default="report",
        help_text="report: a `stalled` event with the rank's Python stack; recover: also fail its node, "
                  "so the job resumes from its last checkpoint")
    ray_worker_loss = serializers.ChoiceField(
        choices=["recover", "tolerate"], required=False,
        help_text="framework ray: recover (default): a lost Ray worker node is a node failure like any other; "
                  "tolerate: the driver handles the loss itself, the job goes on while the head lives")


class FunctionSerializer(serializers.Serializer):
    """A Python function run on every rank (torchyard.fn): its pickle is a bundle of its own."""

    payload = serializers.RegexField(
        r"^[0-9a-f]{64}$", help_text="sha256 of the uploaded bundle that holds the pickled function and arguments",
        error_messages={"invalid": "must be the 64 hex digit sha256 of an uploaded bundle."})
    name = serializers.CharField(max_length=300, help_text="the function's qualified name, as shown")
    python = serializers.RegexField(
        r"^3\.\d{1,2}$", help_text="the caller's Python (major.minor): only machines on the same one can load it",
        error_messages={"invalid": "must be a Python version such as 3.11."})
    result_max_bytes = serializers.IntegerField(
        min_value=1, required=False, help_text="the most a rank's pickled return value may weigh "
                                               "(default and ceiling: the server's TORCHYARD_RESULT_MAX_BYTES)")

    def validate_result_max_bytes(self, value: int) -> int:
        if value > settings.RESULT_MAX_BYTES:
            raise serializers.ValidationError(
                f"at most {settings.RESULT_MAX_BYTES} bytes on this server (TORCHYARD_RESULT_MAX_BYTES).")
        return value


class CompressionSerializer(serializers.Serializer):
    """A DDP communication hook (torchyard.sdk.compression) and its settings, which no other hook takes."""

    enabled = serializers.BooleanField(required=False, help_text="default: true when a hook is named, else false")
    hook = serializers.ChoiceField(choices=list(HOOKS), default="fp16", help_text=(
        "none: plain all-reduce (its bytes counted, to compare with); fp16, bf16: gradients cast for the "
        "all-reduce; powersgd: low-rank PowerSGD (rank, start_iter); topk: the ratio largest entries, with error "
        "feedback (ratio)"))
    rank = serializers.IntegerField(min_value=1, max_value=1024, required=False, help_text=(
        f"powersgd: the rank of its low-rank approximation (default {HOOK_SETTINGS['powersgd']['rank']})"))
    start_iter = serializers.IntegerField(min_value=MIN_START_ITER, max_value=10**9, required=False, help_text=(
        f"powersgd: plain all-reduce steps before compressing (default {HOOK_SETTINGS['powersgd']['start_iter']}; "
        f"at least {MIN_START_ITER}, while DDP settles its buckets)"))
    ratio = serializers.FloatField(min_value=0, max_value=1, required=False, help_text=(
        f"topk: the share of gradient entries each rank sends, above 0, at most 1 "
        f"(default {HOOK_SETTINGS['topk']['ratio']})"))

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        value = super().to_internal_value(data)
        if isinstance(data.get("ratio"), bool):  # FloatField takes true for 1.0
            raise serializers.ValidationError({"ratio": ["A valid number is required."]})
        # Naming a hook asks for it: {"hook": "topk", "ratio": 0.01} alone must not be silently off.
        value.setdefault("enabled", "hook" in data)
        return value

    def validate_ratio(self, value: float) -> float:
        if value <= 0:
            raise serializers.ValidationError("must be above 0 (a share of the gradient's entries, at most 1).")
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        hook = attrs["hook"]
        given = {key for key in ("rank", "start_iter", "ratio") if key in attrs}
        foreign = sorted(given - set(HOOK_SETTINGS.get(hook, {})))
        if foreign:
            raise serializers.ValidationError({key: [
                f"a setting of the {next(h for h, s in HOOK_SETTINGS.items() if key in s)} hook; hook is {hook}."]
                for key in foreign})
        return {**attrs, **{key: value for key, value in HOOK_SETTINGS.get(hook, {}).items() if key not in attrs}}


class JobSpecSerializer(serializers.Serializer):
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
        if isinstance(data, dict):
            unknown = sorted(set(data) - TOP_LEVEL_KEYS)
            if unknown:
                raise serializers.ValidationError({key: ["unknown field."] for key in unknown})
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

    def validate_project(self, value: str) -> str:
        """Unknown, or not one of the submitter's: 400; one they only view: 403 (PermissionDenied)."""
        request = self.context.get("request")
        user = getattr(request, "user", None)
        project = project_by_name(value)
        if project is None or (user is not None and not projects_visible_to(user).filter(pk=project.pk).exists()):
            raise serializers.ValidationError(f"no project named {value!r} that you belong to.")
        if user is not None:
            require_submit(user, project)
        return value

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
        # Sealed here, so the validated spec (stored, planned, logged on error) never holds a value.
        return {key: secretbox.seal(secret) for key, secret in validate_env_names(value).items()}

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs.setdefault("priority", 0)
        check_priority_ceiling(attrs["priority"], attrs.get("project") or DEFAULT_PROJECT,
                               getattr(self.context.get("request"), "user", None))
        model = attrs.pop("model", None)
        if model is not None:
            recipe = MODEL_RECIPES.get(model)
            if recipe is None:
                raise serializers.ValidationError({"model": [f"unknown model {model!r}; known: {', '.join(sorted(MODEL_RECIPES))}."]})
            if attrs.get("entrypoint") not in (None, recipe):
                raise serializers.ValidationError({"model": ["give either model or entrypoint, not both."]})
            attrs["entrypoint"] = recipe
            attrs["model"] = model
        self._validate_dataset(attrs)
        both = sorted(set(attrs.get("secret_env") or {}) & set(attrs["env"]))
        if both:
            raise serializers.ValidationError({"secret_env": [f"{', '.join(both)}: also in env; give it once."]})
        self._validate_launcher(attrs)
        if attrs["distributed"]["launcher"] != "command" or attrs.get("code"):
            self._validate_code(attrs)
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
        try:
            if "min_nodes" not in resources:
                adjust_hyperparameters(attrs["hyperparameters"], attrs["scaling"], world_size)
            # An elastic job may run at any node count of its range: each must take the hyperparameters.
            for nodes in range(resources.get("min_nodes", 1), resources["nodes"] + 1 if "min_nodes" in resources else 1):
                try:
                    adjust_hyperparameters(attrs["hyperparameters"], attrs["scaling"], nodes * resources["procs_per_node"])
                except ValueError as exc:
                    raise ValueError(f"with {nodes} nodes of the range: {exc}") from exc
        except ValueError as exc:
            raise serializers.ValidationError({"hyperparameters": [str(exc)]}) from exc
        return attrs


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
        request = self.context.get("request")
        user = getattr(request, "user", None)
        bundle = None
        if user is not None:
            # Uploaded by this user, or the code of a plugin of one of their projects.
            bundle = bundle_for_user(sha256=code["bundle"], user=user) or shared_bundle_for(sha256=code["bundle"], user=user)
        if bundle is None:
            raise serializers.ValidationError({"code": {"bundle": [
                "no such bundle for this user; upload it first (PUT /api/bundles/{sha256}, or `torchyard run`)."]}})
        if not (entrypoint or module or attrs["distributed"]["launcher"] == "command"):
            raise serializers.ValidationError({"entrypoint": ["give the script to run (a path in the bundle) or a module."]})
        if entrypoint and not bundle.has_file(entrypoint):
            raise serializers.ValidationError({"entrypoint": [f"{entrypoint!r} is not a file of bundle {bundle}."]})
        attrs["code"] = {"bundle": bundle.sha256, "size": bundle.size}


    def _validate_function(self, attrs: dict[str, Any]) -> None:
        function, code = attrs["function"], attrs.get("code")
        clashing = [key for key in ("entrypoint", "module", "model") if attrs.get(key)]
        if clashing:
            raise serializers.ValidationError({key: ["a function job runs its function; give no "
                                                     f"{key}."] for key in clashing})
        if not code:
            raise serializers.ValidationError({"code": ["a function runs in its project: give code.bundle too."]})
        user = getattr(self.context.get("request"), "user", None)
        project = bundle_for_user(sha256=code["bundle"], user=user) if user is not None else None
        if project is None:
            raise serializers.ValidationError({"code": {"bundle": ["no such bundle for this user; upload it first."]}})
        payload = bundle_for_user(sha256=function["payload"], user=user)
        if payload is None:
            raise serializers.ValidationError({"function": {"payload": [
                "no such bundle for this user; upload the function's payload first."]}})
        if not payload.has_file(FUNCTION_PAYLOAD_FILE):
            raise serializers.ValidationError({"function": {"payload": [
                f"bundle {function['payload'][:12]} holds no {FUNCTION_PAYLOAD_FILE}."]}})
        attrs["code"] = {"bundle": project.sha256, "size": project.size}
        attrs["function"] = {**function, "size": payload.size}


def validate_env_names(value: dict[str, str]) -> dict[str, str]:
    """Names a job may set: valid, not torchrun's rank variables, not refused (REFUSED_ENV) unless
    settings.ALLOWED_JOB_ENV allows them; every refused name is named in the error."""
    errors = []
    allowed = [pattern.upper() for pattern in settings.ALLOWED_JOB_ENV]
    for key in value:
        if not ENV_NAME.match(key):
            errors.append(f"{key!r} is not a valid environment variable name.")
        elif key in RESERVED_ENV:
            errors.append(f"{key} is set by torchrun (or Torchyard's launcher) for every rank; it cannot be overridden.")
        elif not any(fnmatch.fnmatchcase(key.upper(), pattern) for pattern in allowed):
            why = next((why for pattern, why in REFUSED_ENV.items() if fnmatch.fnmatchcase(key.upper(), pattern)), None)
            if why is not None:
                errors.append(f"{key} {why}; a job may not set it unless the server allows it "
                              f"(TORCHYARD_ALLOWED_JOB_ENV).")
    if errors:
        raise serializers.ValidationError(errors)
    return value


def public_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """The spec as the API shows it: secret_env's names, each value (sealed) as ***."""
    if "secret_env" not in spec:
        return spec
    return {**spec, "secret_env": secretbox.masked(spec["secret_env"])}


def world_size_of(spec: dict[str, Any]) -> int:
    resources = spec["resources"]
    return resources.get("workers") or resources["nodes"] * resources["procs_per_node"]
