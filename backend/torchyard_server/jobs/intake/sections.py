"""The JobSpec's sections, each validated on its own (DESIGN.md section 4): errors keyed by field,
defaults filled in. serializer.py's JobSpecSerializer puts them together and checks what spans several."""

from __future__ import annotations

import fnmatch
import posixpath
import re
from typing import Any

from django.conf import settings
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from torchyard import protocol
from torchyard.sdk.choices import HOOK_SETTINGS, HOOKS, MIN_START_ITER

from ...rest.strict import StrictFields
from ..placement import policies as placement_policies
from ..spec.cadence import EveryNStepsField
from ..spec.jobspec import (
    RECOVERY_MODES,
    STRAGGLER_POLICIES,
    Checkpointing,
    Compression,
    Distributed,
    Elastic,
    FaultTolerance,
    MemoryCheckpointing,
    Placement,
    Resources,
    Scaling,
    Volume,
)
from ..spec.stall_timeout import StallTimeoutField

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


class CodeSerializer(StrictFields, serializers.Serializer):
    bundle = serializers.RegexField(
        r"^[0-9a-f]{64}$", help_text="sha256 of a bundle uploaded with PUT /api/bundles/{sha256}",
        error_messages={"invalid": "must be the 64 hex digit sha256 of an uploaded bundle."},
    )
    # Filled in from the bundle: a spec the API showed may be sent back as it is.
    shown_only = ("size",)


class RuntimeSerializer(StrictFields, serializers.Serializer):
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


class ResourcesSerializer(StrictFields, serializers.Serializer):
    nodes = NodesField(required=False, help_text=(
        "machines (nodes) of the job: a count, or an elastic range MIN:MAX (\"2:4\") that the planner fills "
        "with as many as fit, at least MIN; stored as nodes: MAX, min_nodes: MIN"))
    min_nodes = serializers.IntegerField(
        min_value=1, max_value=MAX_NODES, required=False,
        help_text="elastic jobs: the fewest nodes the job runs on (nodes is then the most); same as nodes \"MIN:MAX\"")
    procs_per_node = serializers.IntegerField(min_value=1, max_value=64, required=False)
    gpus_per_node = serializers.IntegerField(min_value=0, max_value=64, default=Resources.gpus_per_node)
    min_gpu_memory = serializers.IntegerField(min_value=0, default=Resources.min_gpu_memory, help_text="MB per GPU")
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


class ElasticSerializer(StrictFields, serializers.Serializer):
    min_interval = serializers.FloatField(
        min_value=0, max_value=7 * 24 * 3600, default=Elastic.min_interval,
        help_text="elastic jobs (resources.nodes MIN:MAX): the fewest seconds between two resizes; a job "
                  "running below MAX grows at its first checkpoint commit after that long")


class PlacementSerializer(StrictFields, serializers.Serializer):
    policy = serializers.CharField(
        max_length=100, default=placement_policies.default_policy,
        help_text="the server's default policy (pack unless TORCHYARD_PLACEMENT_POLICY says otherwise); pack: least waste, the machines a node fits most tightly; spread: the least loaded first; "
                  "simple (the Go scheduler's): fewest free GPUs of at least min_gpu_memory left after placing, then least "
                  "GPU memory beyond the asked; balanced (the Go scheduler's): fewest active tasks and most free GPUs; or a policy "
                  "installed by the entry point group torchyard.placement_policies")
    machines = serializers.ListField(child=serializers.CharField(max_length=100), default=list, max_length=256,
                                     help_text="manual placement: these machines, in this order (the first is the master)")
    oversubscribe = serializers.BooleanField(
        default=Placement.oversubscribe, help_text="CPU jobs: share a machine past its core count with other jobs")
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


class DistributedSerializer(StrictFields, serializers.Serializer):
    backend = serializers.ChoiceField(choices=["auto", "gloo", "nccl"], default=Distributed.backend)
    launcher = serializers.ChoiceField(
        choices=["torchrun", "none", "command", "ray", "accelerate"], default=Distributed.launcher,
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
        choices=["data_parallel"], default=Distributed.strategy,
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


class ScalingSerializer(StrictFields, serializers.Serializer):
    mode = serializers.ChoiceField(choices=["keep_global_batch", "scale_global_batch", "none"], default=Scaling.mode)
    lr_rule = serializers.ChoiceField(choices=["linear", "sqrt"], default=Scaling.lr_rule)
    warmup_steps = serializers.IntegerField(min_value=0, default=Scaling.warmup_steps)


class VolumeSerializer(StrictFields, serializers.Serializer):
    """A named host path the job's machines declare (DESIGN.md section 12); the planner places the
    job only where every one is, and the node sees it without mounting (supervisor/volumes.py)."""

    name = serializers.RegexField(protocol.VOLUME_NAME_PATTERN, max_length=63, error_messages={
        "invalid": "lowercase letters, digits, '.', '_' and '-' only, starting with a letter or digit."})
    mount_path = serializers.CharField(max_length=1024, required=False, help_text=(
        "relative (default: the name): a link in the job's working directory; absolute: only where it is the "
        "volume's own path on the machine (nothing is mounted). Every process also gets "
        "TORCHYARD_VOLUME_<NAME> (upper-cased, - and . as _): the path on its machine"))
    access_mode = serializers.ChoiceField(choices=["ReadWriteMany", "ReadWriteOnce"], default=Volume.access_mode, help_text=(
        "ReadWriteMany: one filesystem shared by every node, proven by the nodes' preflight; "
        "ReadWriteOnce: a directory per machine, not checked"))
    size = serializers.IntegerField(min_value=1, required=False, help_text=(
        "bytes free the job needs on the volume: machines whose agent reports less free are skipped"))
    storage_class = serializers.RegexField(protocol.VOLUME_NAME_PATTERN, max_length=63, required=False, help_text=(
        "the class the machine's agent declares the volume with (torchyard agent --volume NAME=PATH,class=CLASS): "
        "machines without it are skipped"), error_messages={
        "invalid": "lowercase letters, digits, '.', '_' and '-' only, starting with a letter or digit."})

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


class MemoryCheckpointingSerializer(StrictFields, serializers.Serializer):
    every_n_steps = serializers.IntegerField(
        min_value=1, max_value=1_000_000, default=MemoryCheckpointing.every_n_steps,
        help_text="a checkpoint in memory every N steps (the script asks sdk.checkpoint.memory_due(step))")
    replicas = serializers.IntegerField(
        min_value=0, max_value=3, default=MemoryCheckpointing.replicas,
        help_text="copies kept on other machines of the job (buddies), beside the saving machine's own: a lost "
                  "machine's checkpoint survives on its buddy. 0: the saving machine only")
    budget = serializers.IntegerField(
        min_value=1 << 20, max_value=1 << 50, default=MemoryCheckpointing.budget,
        help_text="bytes of memory the job may hold on each of its machines (two saves: the last one and the next); "
                  "the planner skips a machine without that much free beside resources.memory_per_node")


class CheckpointingSerializer(StrictFields, serializers.Serializer):
    enabled = serializers.BooleanField(default=Checkpointing.enabled)
    every_n_steps = EveryNStepsField(default=Checkpointing.every_n_steps)
    store = serializers.RegexField(
        r"^(default|local|s3|volume:[a-z0-9][a-z0-9._-]{0,62})$", default=Checkpointing.store, help_text=(
            "default, local or s3 (the server's store), or volume:NAME: a volume of the job, each node writing "
            "to its machine's path of it (file://<path>/torchyard-checkpoints/job-<id>)"),
        error_messages={"invalid": "default, local, s3 or volume:NAME (a volume of the job)."})
    keep = serializers.IntegerField(min_value=1, max_value=1000, default=Checkpointing.keep)
    memory = MemoryCheckpointingSerializer(
        required=False, help_text="checkpoints in memory beside the disk/S3 ones: the agents hold them, each copied to "
                                  "`replicas` other machines, and a recovery resumes from the newest that survives")


class FaultToleranceSerializer(StrictFields, serializers.Serializer):
    mode = serializers.ChoiceField(
        choices=list(RECOVERY_MODES), default=FaultTolerance.mode,
        help_text="restart: a dead rank stops every rank and the attempt is relaunched (warm) from the last "
                  "checkpoint; in_place: only the dead rank is replaced, forked warm on its machine, while the "
                  "others wait, kept alive, and hand it their state from memory (needs torchft on the machines' "
                  "training Python and a script that trains through sdk.resilient(); a machine that is gone, or "
                  "max_restarts replacements spent, falls back to restart)")
    max_restarts = serializers.IntegerField(min_value=0, max_value=100, default=FaultTolerance.max_restarts)
    heartbeat_timeout = serializers.FloatField(min_value=2, max_value=3600, default=FaultTolerance.heartbeat_timeout)
    retry_same_error = serializers.IntegerField(
        min_value=0, max_value=100, default=FaultTolerance.retry_same_error,
        help_text="how many times a failure with the same Python exception (type, message, innermost frame of your "
                  "code) at the same step is retried before the job fails: retrying a deterministic error spends "
                  "GPU time for nothing. 0: a raised exception fails the job at once. Lost machines, killed "
                  "processes (OOM kills included) and hangs are faults of the cluster and keep max_restarts")
    restart_delay = serializers.FloatField(
        min_value=0, max_value=60, default=FaultTolerance.restart_delay,
        help_text="seconds before the first restart, doubling for each next one up to 60 s (the Rust coordinator's "
                  "schedule is 0.5: 500 ms, then 1 s, 2 s ...); 0: the first restart at once (a single failure says "
                  "nothing about the next try), then 2 s, 4 s, 8 s ...")
    stall_timeout = StallTimeoutField(required=False, default=FaultTolerance.stall_timeout)
    on_stall = serializers.ChoiceField(
        choices=["report", "recover"], default=FaultTolerance.on_stall,
        help_text="report: a `stalled` event with the rank's Python stack; recover: also fail its node, "
                  "so the job resumes from its last checkpoint")
    exit_grace = serializers.FloatField(
        min_value=1, max_value=3600, default=FaultTolerance.exit_grace,
        help_text="seconds a rank may stay alive, using no CPU, after its script returned 0 or every other rank of "
                  "the job exited 0 (a teardown that hangs); then its stack is kept, it is ended and the job "
                  "completes with a warning")
    stragglers = serializers.ChoiceField(
        choices=list(STRAGGLER_POLICIES), default=FaultTolerance.stragglers,
        help_text="a rank whose own step time stays straggler_threshold above the median of the other ranks for "
                  "straggler_window seconds: report names it in a `straggler` event and on the job page; replace "
                  "also moves its node onto a hot spare at the next committed checkpoint; off: not watched")
    straggler_threshold = serializers.FloatField(
        min_value=0.05, max_value=10, default=FaultTolerance.straggler_threshold,
        help_text="0.3: a rank 30 % slower than the median of the others is a straggler")
    straggler_window = serializers.FloatField(
        min_value=3, max_value=3600, default=FaultTolerance.straggler_window,
        help_text="seconds a rank must stay that much slower to be named")
    ray_worker_loss = serializers.ChoiceField(
        choices=["recover", "tolerate"], required=False,
        help_text="framework ray: recover (default): a lost Ray worker node is a node failure like any other; "
                  "tolerate: the driver handles the loss itself, the job goes on while the head lives")


class FunctionSerializer(StrictFields, serializers.Serializer):
    """A Python function run on every rank (torchyard.fn): its pickle is a bundle of its own."""

    payload = serializers.RegexField(
        r"^[0-9a-f]{64}$", help_text="sha256 of the uploaded bundle that holds the pickled function and arguments",
        error_messages={"invalid": "must be the 64 hex digit sha256 of an uploaded bundle."})
    name = serializers.CharField(max_length=300, help_text="the function's qualified name, as shown")
    shown_only = ("size",)  # filled in from the bundle
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


class CompressionSerializer(StrictFields, serializers.Serializer):
    """A DDP communication hook (torchyard.sdk.compression) and its settings, which no other hook takes."""

    enabled = serializers.BooleanField(required=False, help_text="default: true when a hook is named, else false")
    hook = serializers.ChoiceField(choices=list(HOOKS), default=Compression.hook, help_text=(
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
