from __future__ import annotations

import math
from typing import ClassVar

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from ...rest.listing import StoredJsonOut
from ..models import Job, JobNode
from ..spec import jobspec
from ..spec.plan import Plan, PlanNode, PlanSpare, PlanVolume
from ..spec.progress import JobProgress, NodeProgress
from ..spec.secrets import public_spec
from ..spec.shapes import out_serializer


class RecipeOut(serializers.Serializer):
    entrypoint = serializers.CharField(help_text="what a JobSpec's entrypoint names, e.g. examples/mlp_ddp.py")
    summary = serializers.CharField(help_text="the first paragraph of the recipe's docstring")


PlanVolumeOut = out_serializer(PlanVolume, "PlanVolumeOut")
PlanSpareOut = out_serializer(PlanSpare, "PlanSpareOut")
PlanNodeOut = out_serializer(PlanNode, "PlanNodeOut")


class PlanPreflightOut(serializers.Serializer):
    master = serializers.CharField(help_text="host:port every node must reach before any rank starts")
    versions = serializers.DictField(child=serializers.CharField(), help_text="each machine's torch and Python versions, by name")


class PlanSkippedOut(serializers.Serializer):
    machine_id = serializers.IntegerField()
    machine_name = serializers.CharField()
    reason = serializers.CharField(help_text='why no node went there: "offline", "draining", "quarantined: ...", "suspect", '
                                   '"2 GPUs free, 4 asked", "less than 40 GB per GPU", "busy: 3 processes of 4 cores, '
                                   '2 more asked", "versions differ: ...", "not in the job\'s placement", "not needed: ..."')


PlanOut = out_serializer(Plan, "PlanOut", doc=(
    "The execution plan: where each node runs, and the hyperparameters after the distributed\n"
    "adjustments (DESIGN.md section 7)."), shapes={"preflight": PlanPreflightOut, "skipped": PlanSkippedOut})


class _Reported(serializers.Field):
    """A value a node or its ranks reported, as stored: null when it is absent or not of its kind, so
    what a script wrote never breaks a job's page."""

    kind: ClassVar[type]

    def __init__(self, **kwargs):
        super().__init__(read_only=True, allow_null=True, **kwargs)

    def to_representation(self, value):
        return value if isinstance(value, self.kind) else None


class _ReportedNumber(_Reported):
    """A number: also null when it is a boolean or not finite."""

    def to_representation(self, value):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return None
        return self.kind(value)


@extend_schema_field({"type": "integer", "nullable": True})
class ReportedInt(_ReportedNumber):
    kind = int


@extend_schema_field({"type": "number", "format": "double", "nullable": True})
class ReportedFloat(_ReportedNumber):
    kind = float


@extend_schema_field({"type": "string", "nullable": True})
class ReportedText(_Reported):
    kind = str


@extend_schema_field({"type": "boolean", "nullable": True})
class ReportedBool(_Reported):
    kind = bool


class StalledRankOut(serializers.Serializer):
    step = ReportedInt()
    stalled_for = ReportedFloat(help_text="seconds without a step")
    timeout = ReportedFloat(default=None, help_text="the deadline that applied: seconds without a step that make a hang")
    timeout_basis = serializers.CharField(allow_blank=True, default="", help_text=(
        'how that deadline was set: "auto: 2 x the p95 step time (...)", the job\'s own stall_timeout, ...'))
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
    """The control plane's view of the current attempt's stalled ranks (jobs/control/stalls.py)."""

    attempt = serializers.IntegerField()
    kind = serializers.ChoiceField(choices=["culprit", "collective", "straggler", "rank"])
    summary = serializers.CharField()
    ranks = serializers.DictField(child=StalledRankOut(), help_text="by rank")
    culprits = StallCulpritOut(many=True, default=list, help_text="who holds the job, when the evidence says (kind culprit)")
    quarantined = serializers.ListField(child=serializers.CharField(), default=list, help_text=(
        "the culprits' machines quarantined (on_stall: recover): nothing is placed there until released"))


class StragglerOut(serializers.Serializer):
    """A rank much slower than the job's other ranks (jobs/control/stragglers.py), with what its machine shows."""

    rank = serializers.IntegerField()
    machine = serializers.CharField(allow_null=True)
    node_rank = serializers.IntegerField(allow_null=True)
    own_step_s = serializers.FloatField(help_text="seconds per step of its own: not waiting on its peers")
    median_s = serializers.FloatField(help_text="the median of the other ranks' own step time")
    ratio = serializers.FloatField(allow_null=True, help_text="own_step_s / median_s")
    step_s = serializers.FloatField(allow_null=True, help_text="wall seconds per step (every rank's, in lockstep)")
    slow_since = serializers.FloatField(allow_null=True, help_text="epoch seconds: since when it has been that slow")
    evidence = serializers.CharField(help_text=(
        "what its machine showed: process stopped, CPU quota throttling, waiting for a CPU, steal, other processes"))
    policy = serializers.ChoiceField(choices=list(jobspec.STRAGGLER_POLICIES))
    replace = serializers.CharField(allow_null=True, default=None, help_text=(
        'policy replace: "pending" (at the next committed checkpoint), "replaced", or why it could not be; '
        'null under report'))


JobProgressOut = out_serializer(JobProgress, "JobProgressOut", doc=JobProgress.__doc__,
                                numbers={int: ReportedInt, float: ReportedFloat},
                                shapes={"stall": StallOut, "stragglers": StragglerOut})


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


NodeProgressOut = out_serializer(NodeProgress, "NodeProgressOut", numbers={int: ReportedInt, float: ReportedFloat},
                                 shapes={"ray": NodeRayOut})


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


# A job's spec as stored: what JobSpecSerializer (intake/serializer.py) made of the submitted one, every section
# filled with its defaults. The fields a submission may leave out stay optional here.
JobCodeOut = out_serializer(jobspec.Code, "JobCodeOut")
JobRuntimeOut = out_serializer(jobspec.Runtime, "JobRuntimeOut")
JobResourcesOut = out_serializer(jobspec.Resources, "JobResourcesOut")
JobPlacementOut = out_serializer(jobspec.Placement, "JobPlacementOut")
JobDistributedOut = out_serializer(jobspec.Distributed, "JobDistributedOut")
JobScalingOut = out_serializer(jobspec.Scaling, "JobScalingOut")
JobMemoryCheckpointingOut = out_serializer(jobspec.MemoryCheckpointing, "JobMemoryCheckpointingOut")
JobCheckpointingOut = out_serializer(jobspec.Checkpointing, "JobCheckpointingOut")
JobFaultToleranceOut = out_serializer(jobspec.FaultTolerance, "JobFaultToleranceOut")
JobCompressionOut = out_serializer(jobspec.Compression, "JobCompressionOut")
JobFunctionOut = out_serializer(jobspec.Function, "JobFunctionOut")
JobPreemptionOut = out_serializer(jobspec.Preemption, "JobPreemptionOut")
JobVolumeOut = out_serializer(jobspec.Volume, "JobVolumeOut")
JobElasticOut = out_serializer(jobspec.Elastic, "JobElasticOut")
JobSpecOut = out_serializer(jobspec.JobSpec, "JobSpecOut", base=StoredJsonOut)


class LinkPairOut(serializers.Serializer):
    network = serializers.CharField(help_text='"10.0.1.0/24"')
    a = serializers.IntegerField(help_text="the node rank that probed")
    b = serializers.IntegerField(help_text="the node rank probed")
    mb_per_s = serializers.FloatField(required=False, help_text="what b received over the burst, MB/s")
    latency_ms = serializers.FloatField(required=False, help_text="the median TCP round trip of a few one-byte pings")
    bytes = serializers.IntegerField(required=False)
    error = serializers.CharField(required=False, help_text="why it could not be measured")
    flagged = serializers.BooleanField(help_text="below half the median of every pair on every network")


class LinkNetworkOut(serializers.Serializer):
    network = serializers.CharField()
    interfaces = serializers.DictField(child=serializers.CharField(), help_text="node rank -> its interface on it")
    slowest_mb_per_s = serializers.FloatField(allow_null=True)
    latency_ms = serializers.FloatField(allow_null=True, help_text="the median of its pairs'")
    usable = serializers.BooleanField(help_text="every pair was measured on it")
    registered = serializers.BooleanField(help_text="the master's registered address is on it")
    chosen = serializers.BooleanField(help_text="the job's traffic is pinned to it")


class JobLinksOut(StoredJsonOut):
    """The link matrix between the job's machines, measured by the preflight of the attempt that
    first ran on them ({} before, and for one-node jobs)."""

    attempt = serializers.IntegerField()
    measured_at = serializers.FloatField(help_text="epoch seconds")
    seconds = serializers.FloatField(help_text="how long measuring took")
    machines = serializers.DictField(child=serializers.CharField(), help_text="node rank -> machine name")
    networks = LinkNetworkOut(many=True)
    pairs = LinkPairOut(many=True)
    median_mb_per_s = serializers.FloatField(allow_null=True)
    chosen = serializers.CharField(help_text='the network the job\'s traffic is pinned to; "": the routed default')
    addresses = serializers.DictField(child=serializers.CharField(), help_text="machine -> its address on the chosen network")
    master_address = serializers.CharField()
    summary = serializers.CharField(help_text="the choice and the slow pairs in words")

    class Meta:
        optional_fields = ("attempt", "measured_at", "seconds", "machines", "networks", "pairs", "median_mb_per_s",
                           "chosen", "addresses", "master_address", "summary")


class JobDetailOut(JobSummaryOut):
    spec = JobSpecOut(help_text="the validated JobSpec; secret_env values as ***")
    plan = PlanOut(allow_null=True, help_text="null until the job is dispatched")
    nodes = serializers.SerializerMethodField()
    links = JobLinksOut(help_text="the link matrix its preflight measured between its machines ({} before)")

    class Meta(JobSummaryOut.Meta):
        fields = [*JobSummaryOut.Meta.fields, "spec", "plan", "master_addr", "master_port", "nodes", "links"]

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


class StacksNodeOut(serializers.Serializer):
    node_rank = serializers.IntegerField()
    machine = serializers.CharField()


class StacksRequestedOut(serializers.Serializer):
    request = serializers.CharField(help_text="the `request` of the `stacks` events that answer this")
    nodes = StacksNodeOut(many=True, help_text="the nodes asked: one `stacks` event each")
