from __future__ import annotations

import math

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from torchyard.sdk.choices import HOOKS

from ..rest.listing import StoredJsonOut
from .models import Job, JobNode
from .spec_secrets import public_spec


class RecipeOut(serializers.Serializer):
    entrypoint = serializers.CharField(help_text="what a JobSpec's entrypoint names, e.g. examples/mlp_ddp.py")
    summary = serializers.CharField(help_text="the first paragraph of the recipe's docstring")


class PlanVolumeOut(serializers.Serializer):
    name = serializers.CharField()
    path = serializers.CharField(help_text="on the node's machine")
    mount_path = serializers.CharField()
    access_mode = serializers.ChoiceField(choices=["ReadWriteMany", "ReadWriteOnce"])


class PlanSpareOut(serializers.Serializer):
    machine_id = serializers.IntegerField()
    machine_name = serializers.CharField()
    host = serializers.CharField()
    gpus = serializers.ListField(child=serializers.IntegerField(), help_text="the GPUs held on it for the job")


class PlanNodeOut(serializers.Serializer):
    node_rank = serializers.IntegerField()
    machine_id = serializers.IntegerField()
    machine_name = serializers.CharField()
    host = serializers.CharField()
    nproc = serializers.IntegerField()
    rank_start = serializers.IntegerField()
    rank_end = serializers.IntegerField()
    gpus = serializers.ListField(child=serializers.IntegerField(), help_text="GPU indexes on the machine")
    # Only in the plans of jobs that ask for volumes.
    volumes = PlanVolumeOut(many=True, required=False, help_text="the job's volumes as this node's machine has them")

    class Meta:
        optional_fields = ("volumes",)


class PlanPreflightOut(serializers.Serializer):
    master = serializers.CharField(help_text="host:port every node must reach before any rank starts")
    versions = serializers.DictField(child=serializers.CharField(), help_text="each machine's torch and Python versions, by name")


class PlanSkippedOut(serializers.Serializer):
    machine_id = serializers.IntegerField()
    machine_name = serializers.CharField()
    reason = serializers.CharField(help_text='why no node went there: "offline", "draining", "suspect", '
                                   '"2 GPUs free, 4 asked", "less than 40 GB per GPU", "busy: 3 processes of 4 cores, '
                                   '2 more asked", "versions differ: ...", "not in the job\'s placement", "not needed: ..."')


class PlanOut(serializers.Serializer):
    """The execution plan: where each node runs, and the hyperparameters after the distributed
    adjustments (DESIGN.md section 7)."""

    world_size = serializers.IntegerField()
    nnodes = serializers.IntegerField()
    procs_per_node = serializers.IntegerField()
    master_addr = serializers.CharField()
    master_port = serializers.IntegerField()
    backend = serializers.ChoiceField(choices=["gloo", "nccl"])
    # distributed.launcher (plans stored before launchers existed have none: torchrun).
    launcher = serializers.ChoiceField(choices=["torchrun", "none", "command", "ray", "accelerate"], required=False)
    nodes = PlanNodeOut(many=True)
    # resources.spares: the machines held for the job (the job's plans without spares have none).
    spares = PlanSpareOut(many=True, required=False,
                          help_text="hot spares held for the job, warmed with its code; one takes a lost machine's place")
    hyperparameters = serializers.DictField()
    # An elastic job's node range [MIN, MAX] (resources.nodes "MIN:MAX"); nnodes is what it starts with.
    nodes_range = serializers.ListField(child=serializers.IntegerField(min_value=1), min_length=2, max_length=2,
                                        required=False)
    warnings = serializers.ListField(child=serializers.CharField())
    # Plans stored before preflight existed have none.
    preflight = PlanPreflightOut(required=False)
    # Every machine the plan did not choose, with why (plans stored before it have none).
    skipped = PlanSkippedOut(many=True, required=False)

    class Meta:
        optional_fields = ('preflight', 'skipped', 'launcher', 'nodes_range', 'spares')


class _Reported(serializers.Field):
    """A number the ranks reported, as stored: null when it is absent or is not a finite number, so
    what a script wrote never breaks a job's page."""

    def __init__(self, kind: type[int] | type[float], **kwargs):
        self.kind = kind
        super().__init__(read_only=True, allow_null=True, **kwargs)

    def to_representation(self, value):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return None
        return self.kind(value)


@extend_schema_field({"type": "integer", "nullable": True})
class ReportedInt(_Reported):
    def __init__(self, **kwargs):
        super().__init__(int, **kwargs)


@extend_schema_field({"type": "number", "format": "double", "nullable": True})
class ReportedFloat(_Reported):
    def __init__(self, **kwargs):
        super().__init__(float, **kwargs)


class StalledRankOut(serializers.Serializer):
    step = ReportedInt()
    stalled_for = ReportedFloat(help_text="seconds without a step")
    process_state = serializers.CharField(allow_null=True, help_text='"running", "sleeping", "stopped", ...')
    waits_in = serializers.CharField(allow_null=True, allow_blank=True, default=None, help_text=(
        "the collective frame its main thread waits in; empty: outside any collective; null: no stack"))
    frame = serializers.CharField(allow_null=True, default=None, help_text="its main thread's innermost Python frame")
    last_line = serializers.CharField(allow_null=True, allow_blank=True)
    machine = serializers.CharField(allow_null=True)
    node_rank = ReportedInt()
    event = serializers.IntegerField(help_text="the `stalled` event's id")


class StallCulpritOut(serializers.Serializer):
    """A rank (or a node gone quiet) that holds the others, and what says so."""

    rank = serializers.IntegerField(allow_null=True, help_text="null when a whole node went quiet")
    ranks = serializers.ListField(child=serializers.IntegerField(), help_text="the ranks it stands for")
    machine = serializers.CharField(allow_null=True)
    node_rank = serializers.IntegerField(allow_null=True)
    cause = serializers.ChoiceField(choices=["process", "heartbeat", "stack"], help_text=(
        "process: its process is stopped, dead or in uninterruptible sleep; heartbeat: its node stopped "
        "heart-beating; stack: its stack is outside any collective while other ranks wait in one"))
    evidence = serializers.CharField(help_text='e.g. "process stopped, SIGSTOP?"')


class StallOut(serializers.Serializer):
    """The control plane's view of the current attempt's stalled ranks (jobs/stalls.py)."""

    attempt = serializers.IntegerField()
    kind = serializers.ChoiceField(choices=["culprit", "collective", "straggler", "rank"])
    summary = serializers.CharField()
    ranks = serializers.DictField(child=StalledRankOut(), help_text="by rank")
    culprits = StallCulpritOut(many=True, default=list, help_text="who holds the job, when the evidence says (kind culprit)")
    suspected = serializers.ListField(child=serializers.CharField(), default=list, help_text=(
        "the culprits' machines made suspect (on_stall: recover)"))


class JobProgressOut(serializers.Serializer):
    """A job's progress, folded from its ranks' metrics (jobs/rates.py); null until reported."""

    step = ReportedInt()
    total_steps = ReportedInt(help_text="declared by the script, or the spec's --steps")
    loss = ReportedFloat()
    lr = ReportedFloat()
    throughput = ReportedFloat(help_text="every rank's latest throughput, summed")
    throughput_by_rank = serializers.DictField(child=ReportedFloat(), default=dict,
                                               help_text="each rank's latest throughput, by rank: a straggler stands out")
    steps_per_second = ReportedFloat(help_text="over the current attempt")
    samples_per_second = ReportedFloat()
    eta_seconds = ReportedFloat()
    stall = StallOut(allow_null=True, help_text="null unless ranks of the current attempt stalled")


@extend_schema_field({"type": "string", "nullable": True})
class ReportedText(serializers.Field):
    """A string a node reported, as stored: null when it is absent or not a string."""

    def __init__(self, **kwargs):
        super().__init__(read_only=True, allow_null=True, **kwargs)

    def to_representation(self, value):
        return value if isinstance(value, str) else None


@extend_schema_field({"type": "boolean", "nullable": True})
class ReportedBool(serializers.Field):
    """A flag a node reported, as stored: null when it is absent or not a boolean."""

    def __init__(self, **kwargs):
        super().__init__(read_only=True, allow_null=True, **kwargs)

    def to_representation(self, value):
        return value if isinstance(value, bool) else None


@extend_schema_field({"type": "object", "additionalProperties": {"type": "integer", "minimum": 1, "maximum": 65535}})
class ReportedPorts(serializers.Field):
    """Ports by name as a node reported them: only the entries that are TCP port numbers ({} when
    there are none, or the value is not an object)."""

    def __init__(self, **kwargs):
        super().__init__(read_only=True, default=dict, **kwargs)

    def to_representation(self, value):
        if not isinstance(value, dict):
            return {}
        return {str(name): port for name, port in value.items()
                if isinstance(port, int) and not isinstance(port, bool) and 0 < port < 65536}


class NodeRayOut(serializers.Serializer):
    """framework ray: the node's Ray processes as its supervisor reported them in its `running` event
    (supervisor/ray_launch.py). Besides the head's GCS (the plan's master_addr:master_port), every
    port was picked free on the node's machine at launch. Each field is null (ports {}) when the
    report lacks it or holds something else."""

    head = ReportedBool(help_text="node 0: it runs the Ray head (the GCS, the dashboard and the driver)")
    address = ReportedText(help_text="the node's own address, that its Ray processes bind")
    gcs = ReportedText(help_text="HOST:PORT of the head's GCS, that the workers and the driver join")
    ports = ReportedPorts(help_text="port by name: node_manager, object_manager, dashboard_agent_listen, "
                          "dashboard_agent_grpc, metrics_export, runtime_env_agent, min_worker and max_worker "
                          "(the worker processes' range, both ends included), and dashboard on the head")
    temp_dir = ReportedText(help_text="Ray's temp dir (its session logs) on the node's machine")
    object_store_bytes = ReportedInt(help_text="the node's object store")
    num_cpus = ReportedInt(help_text="CPUs the node gives Ray")
    num_gpus = ReportedInt(help_text="GPUs the node gives Ray")
    dashboard_port = ReportedInt(help_text="the head's dashboard port (Torchyard proxies it at "
                                 "/api/jobs/{id}/ray/); null on a worker")

    def to_representation(self, instance):
        # A stored value that is not an object (never written so, but the page must not break on it).
        return super().to_representation(instance) if isinstance(instance, dict) else None


class NodeProgressOut(serializers.Serializer):
    step = ReportedInt()
    loss = ReportedFloat()
    throughput = ReportedFloat()
    ray = NodeRayOut(allow_null=True, read_only=True,
                     help_text="framework ray: the node's Ray ports, from its `running` report; null before it "
                     "and for every other job")


class NodeMachineOut(serializers.Serializer):
    id = serializers.IntegerField(source="machine_id", allow_null=True, help_text="null once the machine is removed")
    name = serializers.CharField(source="machine_name")
    host = serializers.CharField()


class JobSummaryOut(serializers.ModelSerializer):
    owner = serializers.CharField(source="owner.username")
    project = serializers.CharField(source="project.name")
    progress = JobProgressOut()

    class Meta:
        model = Job
        fields = [
            "id", "name", "status", "status_reason", "world_size", "attempt", "restarts", "progress",
            "created_at", "started_at", "finished_at", "owner", "project", "priority", "queued_at", "borrowing",
        ]
        extra_kwargs = {
            "priority": {"help_text": "higher first in the queue: low -10, normal 0, high 10 (PATCH /api/jobs/{id})"},
            "queued_at": {"help_text": "when it last entered the queue (GET /api/queue has its place and reason)"},
            "borrowing": {"help_text": "it holds more than its project's quota leaves it (started on idle capacity)"},
        }


class JobNodeOut(serializers.ModelSerializer):
    machine = NodeMachineOut(source="*")
    gpus = serializers.ListField(child=serializers.IntegerField(), help_text="GPU indexes on the machine")
    progress = NodeProgressOut()

    class Meta:
        model = JobNode
        fields = [
            "id", "attempt", "node_rank", "machine", "nproc", "rank_start", "rank_end", "gpus", "status",
            "status_reason", "exit_code", "pid", "last_heartbeat", "progress", "started_at", "finished_at",
        ]


# A job's spec as stored: what JobSpecSerializer (spec.py) made of the submitted one, every section
# filled with its defaults. The fields a submission may leave out stay optional here.
class JobCodeOut(serializers.Serializer):
    bundle = serializers.CharField(help_text="sha256 of the job's code bundle")
    size = serializers.IntegerField(help_text="the bundle's archive bytes")


class JobRuntimeOut(serializers.Serializer):
    pip = serializers.ListField(child=serializers.CharField())


class JobResourcesOut(serializers.Serializer):
    nodes = serializers.IntegerField()
    procs_per_node = serializers.IntegerField()
    gpus_per_node = serializers.IntegerField()
    min_gpu_memory = serializers.IntegerField(help_text="MB per GPU")
    workers = serializers.IntegerField(help_text="DistroML's form: the world size, spread by the planner")
    gpus_per_worker = serializers.IntegerField()
    cpus_per_node = serializers.IntegerField(help_text="CPU cores each node needs")
    memory_per_node = serializers.IntegerField(help_text="bytes of free memory each node needs")
    min_nodes = serializers.IntegerField(help_text="an elastic job's MIN (nodes is its MAX)")
    spares = serializers.IntegerField(help_text="hot spares: extra machines held for the job")

    class Meta:
        # Either nodes and procs_per_node, or workers (and gpus_per_worker when given).
        optional_fields = ("nodes", "procs_per_node", "workers", "gpus_per_worker", "cpus_per_node", "memory_per_node",
                           "min_nodes", "spares")


class JobPlacementOut(serializers.Serializer):
    policy = serializers.CharField(help_text="pack, spread, simple, balanced or an installed policy's name")
    machines = serializers.ListField(child=serializers.CharField(), help_text="manual placement, the master first")
    oversubscribe = serializers.BooleanField()
    labels = serializers.DictField(child=serializers.CharField(), help_text="machine labels every node's machine has")

    class Meta:
        optional_fields = ("labels",)


class JobDistributedOut(serializers.Serializer):
    backend = serializers.ChoiceField(choices=["auto", "gloo", "nccl"])
    launcher = serializers.ChoiceField(choices=["torchrun", "none", "command", "ray", "accelerate"])
    command = serializers.ListField(child=serializers.CharField(), required=False,
                                    help_text="launcher command: the argv run once per node")
    warm = serializers.BooleanField(help_text="false: every rank starts cold, never from the warm pool; absent: true")
    strategy = serializers.ChoiceField(choices=["data_parallel"])

    class Meta:
        optional_fields = ("command", "warm")


class JobScalingOut(serializers.Serializer):
    mode = serializers.ChoiceField(choices=["keep_global_batch", "scale_global_batch", "none"])
    lr_rule = serializers.ChoiceField(choices=["linear", "sqrt"])
    warmup_steps = serializers.IntegerField()


class JobCheckpointingOut(serializers.Serializer):
    enabled = serializers.BooleanField()
    every_n_steps = serializers.IntegerField()
    store = serializers.ChoiceField(choices=["default", "local", "s3"])
    keep = serializers.IntegerField()


class JobFaultToleranceOut(serializers.Serializer):
    max_restarts = serializers.IntegerField()
    heartbeat_timeout = serializers.FloatField()
    stall_timeout = serializers.FloatField(allow_null=True, help_text="null: 10x the job's median step time, at least 60 s")
    on_stall = serializers.ChoiceField(choices=["report", "recover"])
    ray_worker_loss = serializers.ChoiceField(choices=["recover", "tolerate"], required=False,
                                              help_text="framework ray: what a lost Ray worker node does")

    class Meta:
        optional_fields = ("ray_worker_loss",)


class JobCompressionOut(serializers.Serializer):
    enabled = serializers.BooleanField()
    hook = serializers.ChoiceField(choices=list(HOOKS))
    rank = serializers.IntegerField(help_text="powersgd only")
    start_iter = serializers.IntegerField(help_text="powersgd only")
    ratio = serializers.FloatField(help_text="topk only")

    class Meta:
        optional_fields = ("rank", "start_iter", "ratio")


class JobFunctionOut(serializers.Serializer):
    payload = serializers.CharField(help_text="sha256 of the bundle holding the pickled function and arguments")
    name = serializers.CharField(help_text="the function's qualified name")
    python = serializers.CharField(help_text="the Python (major.minor) it was pickled on")
    size = serializers.IntegerField(help_text="the payload bundle's archive bytes")
    result_max_bytes = serializers.IntegerField()

    class Meta:
        optional_fields = ("result_max_bytes", "size")


class JobPreemptionOut(serializers.Serializer):
    grace = serializers.FloatField(help_text="seconds to checkpoint and yield before the ranks are stopped")


class JobVolumeOut(serializers.Serializer):
    name = serializers.CharField(help_text="a volume machines declare (Machine.volumes)")
    mount_path = serializers.CharField()
    access_mode = serializers.ChoiceField(choices=["ReadWriteMany", "ReadWriteOnce"])


class JobElasticOut(serializers.Serializer):
    min_interval = serializers.FloatField(help_text="the fewest seconds between two resizes")


class JobSpecOut(StoredJsonOut):
    name = serializers.CharField()
    project = serializers.CharField()
    entrypoint = serializers.CharField(help_text="a script in the job's code, or a built-in recipe")
    module = serializers.CharField(help_text="run as `python -m MODULE` from the job's code instead of an entrypoint")
    code = JobCodeOut(help_text="absent for a built-in recipe")
    runtime = JobRuntimeOut()
    args = serializers.ListField(child=serializers.CharField())
    env = serializers.DictField(child=serializers.CharField())
    secret_env = serializers.DictField(child=serializers.CharField(), help_text="names only: every value is ***")
    resources = JobResourcesOut()
    placement = JobPlacementOut()
    distributed = JobDistributedOut()
    hyperparameters = serializers.DictField(help_text="as submitted: the script's own, any JSON")
    scaling = JobScalingOut()
    checkpointing = JobCheckpointingOut()
    fault_tolerance = JobFaultToleranceOut()
    compression = JobCompressionOut()
    function = JobFunctionOut(help_text="a function job's function (torchyard.fn); absent for a script")
    framework = serializers.ChoiceField(choices=["pytorch", "ray"])
    model = serializers.CharField(help_text="DistroML's model name the entrypoint was chosen by")
    dataset = serializers.CharField()
    priority = serializers.IntegerField(help_text="as submitted (the job's current one is its `priority`)")
    time_limit = serializers.IntegerField(help_text="seconds the job may run from its start")
    preemptible = serializers.BooleanField(help_text="false: never preempted (and never borrows); absent: true")
    preemption = JobPreemptionOut()
    volumes = JobVolumeOut(many=True, help_text="shared directories the job mounts")
    elastic = JobElasticOut(help_text="an elastic job's (resources.nodes MIN:MAX) resize settings")

    class Meta:
        optional_fields = ("entrypoint", "module", "code", "secret_env", "model", "dataset", "function", "priority",
                           "time_limit", "preemptible", "preemption", "volumes", "elastic")


class JobDetailOut(JobSummaryOut):
    spec = JobSpecOut(help_text="the validated JobSpec; secret_env values as ***")
    plan = PlanOut(allow_null=True, help_text="null until the job is dispatched")
    nodes = serializers.SerializerMethodField()

    class Meta(JobSummaryOut.Meta):
        fields = [*JobSummaryOut.Meta.fields, "spec", "plan", "master_addr", "master_port", "nodes"]

    def to_representation(self, job: Job) -> dict:
        # Every route and stream that shows a job's spec comes through here: secrets as ***.
        data = super().to_representation(job)
        data["spec"] = public_spec(data["spec"] or {})
        return data

    @extend_schema_field(JobNodeOut(many=True))
    def get_nodes(self, job: Job) -> list[dict]:
        # The current attempt's nodes; earlier attempts are in /api/jobs/{id}/nodes?attempt=N.
        nodes = [n for n in job.nodes.all() if n.attempt == job.attempt]
        return JobNodeOut(nodes, many=True).data


def job_detail_data(job: Job) -> dict:
    return JobDetailOut(job).data


def job_summary_data(job: Job) -> dict:
    return JobSummaryOut(job).data
