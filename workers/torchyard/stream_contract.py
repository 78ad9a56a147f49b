"""The wire contract of the live streams a client reads: `/api/jobs/{job_id}/stream` and
`/api/cluster/stream` (WebSockets), and the events they carry (the same events the REST routes page).

Named here once, beside protocol.py (what travels between the control plane and the workers), and
plain standard library like it: the server's consumers and the CLI's follower take their close codes
and message names from here, and the server publishes the shapes below in its OpenAPI schema
(live/contract_schema.py: one component per TypedDict, under its class name), from which the
dashboard's types are generated with the REST ones. A change here is a change of the wire.
"""

from __future__ import annotations

import types
from datetime import datetime
from typing import Annotated, Any, Final, Literal, NotRequired, Protocol, TypedDict

# --- Close codes ----------------------------------------------------------------------------------
# Application codes (4000-4999) a stream closes with, after accepting, so a client can tell them from
# a network failure. The first two mean "do not retry"; the last "reconnect at once".
CLOSE_UNAUTHENTICATED = 4401  # not signed in (or the session ended): log in again
CLOSE_NOT_FOUND = 4404  # no such job, or not one of your projects'
# Fell behind (or live events were lost on the way): reconnect at once with ?after=<the last event id
# you have>; the replay resumes from it, so nothing is lost and nothing comes twice.
CLOSE_RESUME = 4429
REFUSED_CLOSE_CODES = (CLOSE_UNAUTHENTICATED, CLOSE_NOT_FOUND)
CLOSE_CODES = (*REFUSED_CLOSE_CODES, CLOSE_RESUME)

# --- Message types (each message's "type"; Final: each is its message's Literal to mypy) -----------
JOB: Final = "job"  # the job's detail, on connect and whenever it changed (its progress: every rank summed)
HISTORY: Final = "history"  # sent before a tail replay (?history=tail): where older log lines begin
EVENTS: Final = "events"  # a frame of events in id order
REPLAYED: Final = "replayed"  # the replay is over: from here on everything is live
ERROR: Final = "error"  # the client sent something (the streams take nothing)
MACHINES: Final = "machines"
JOBS: Final = "jobs"
JOBS_CHANGED: Final = "jobs_changed"
QUEUE: Final = "queue"


# Values whose shape is a component of the REST schema (Annotated with its name).
JobDetail = Annotated[dict[str, Any], "JobDetailOut"]
JobSummary = Annotated[dict[str, Any], "JobSummaryOut"]
Machine = Annotated[dict[str, Any], "MachineOut"]
QueueEntry = Annotated[dict[str, Any], "QueueEntryOut"]
JobStatus = Annotated[str, "JobStatusEnum"]
NodeStatus = Annotated[str, "NodeStatusEnum"]


# --- Events ---------------------------------------------------------------------------------------
# Every event, on the streams and the REST routes alike, is one flat object: its envelope (who it is
# of, and when), then its type's own fields (the payload, as the node supervisors, the agents and the
# controller write it). Each TypedDict of JobEvent below is one type of event: the envelope it extends,
# `type`, and its payload. The producers take these TypedDicts (jobs/events.py publish_on_commit, the
# supervisors' publisher, the agent's publish), so mypy holds each to its schema.
class EventEnvelope(TypedDict, total=False):
    """The envelope, declared once. A node's publisher writes it (from the node's launch), the
    controller and the agents `job`, `attempt` and the node's fields where the event is of one; ingest
    keeps each field in a column of the event's row (an event without `job` is dropped), and what is
    left is the payload. The routes send an event back as EVENT_ENVELOPE orders it: with the `id`
    ingest gave it, `ts` as an ISO 8601 time, and without the producer's `key` (the schema's EventOut,
    made from these fields)."""

    id: int  # given by ingest, which stores the event: the resume cursor (none on the way in)
    job: int
    node: int | None  # the JobNode's id
    node_rank: int | None
    rank: int | None  # the global rank, when the event is one rank's
    attempt: int
    seq: int | None  # a node supervisor's own number for it (1, 2, ... per node): ingest dedupes by (node, seq)
    ts: float | str  # epoch seconds as produced (and applied); an ISO 8601 time as the routes send it
    key: str  # the controller's and the agents' dedupe key (a supervisor's is its seq); never sent


# The fields ingest takes out of an event into its row's columns (the rest is its payload): the
# envelope as produced, and the event's type.
STORED_APART = frozenset({*EventEnvelope.__annotations__, "type"} - {"id"})
# An event as the routes send it, in this order: the envelope without the producer's key, its type
# before its time (streaming/models.py event_message, streaming/jsontext.py event_text, EventOut).
EVENT_ENVELOPE = (*(name for name in EventEnvelope.__annotations__ if name not in ("ts", "key")), "type", "ts")
ENVELOPE_COMPONENT = "EventOut"


class JobStateEvent(EventEnvelope):
    """A job's transition (`previous` is null for the first, on submission)."""

    type: Literal["state"]
    scope: Literal["job"]
    status: JobStatus
    previous: JobStatus | None
    reason: str
    # A priority change (status unchanged): the new and the previous priority. Its reason is the
    # change, for the timeline; the job's status reason (why it waits) stays what it was.
    priority: NotRequired[int]
    previous_priority: NotRequired[int]
    # The queue's: a job that preempts others to make room names them (job ids), status unchanged...
    preempted: NotRequired[list[int]]
    # ... and a live job that holds a hot spare again names the spare's machine ids.
    spares: NotRequired[list[int]]


class LogLine(TypedDict):
    """One of the last lines a node's processes printed (a failed node's state quotes them)."""

    rank: int | None  # null: the supervisor's, torchrun's, the preparation's
    stream: Literal["stdout", "stderr"]
    line: str


class RayNode(TypedDict):
    """framework ray: a node's Ray processes, as its `running` report gives them (supervisor/commands.py);
    the job page shows them, and the head's dashboard is proxied at /api/jobs/{id}/ray/."""

    head: bool  # node 0: the GCS, the dashboard and the driver
    address: str  # the node's own address, that its Ray processes bind
    gcs: str  # HOST:PORT of the head's GCS
    ports: dict[str, int]  # port by name (supervisor/ray_launch.py PORT_NAMES), every one picked free
    temp_dir: str
    object_store_bytes: int
    num_cpus: int
    num_gpus: int
    dashboard_port: NotRequired[int]  # the head's


class RankError(TypedDict):
    """A Python exception a rank's script raised: its type (module-qualified, builtins bare), its
    message (at most 500 characters), the innermost frame of the user's code ("train.py:42 in step"),
    the global rank, and the step the rank last reported (null when it reported none)."""

    type: str
    message: str
    frame: str
    rank: int
    step: int | None


class NodeStateEvent(EventEnvelope):
    """A node's transition, or its own report (its supervisor's, its agent's), without `previous`."""

    type: Literal["state"]
    scope: Literal["node"]
    status: NodeStatus
    previous: NotRequired[NodeStatus | None]
    reason: str
    # Completed, with something the user should know: a rank ended for outliving the job's work.
    warning: NotRequired[str]
    # A supervisor's own reports: its process and host, and once running its launcher's pid (and a
    # Ray node's processes); at its end the launcher's exit code, and for a failed node its last lines.
    supervisor_pid: NotRequired[int]
    hostname: NotRequired[str]
    pid: NotRequired[int | None]
    ray: NotRequired[RayNode]
    exit_code: NotRequired[int | None]
    last_lines: NotRequired[list[LogLine]]
    # Failed, and a relaunch would fail the same way (the job's function raised).
    fatal: NotRequired[bool]
    # Stopped after its ranks checkpointed and yielded for a preemption.
    yielded: NotRequired[bool]
    # Failed because a rank's script raised: the first exception raised on the node (the controller
    # retries the same one at the same step only fault_tolerance.retry_same_error times).
    error: NotRequired[RankError]


class LogEvent(EventEnvelope):
    type: Literal["log"]
    stream: Literal["stdout", "stderr"]
    line: str
    # Who printed it: "worker" (a rank: `rank`, `local_rank`), "supervisor", "torchrun", "ray",
    # "prepare" (the environment's build), "sdk" (the script, through the SDK).
    source: NotRequired[str]
    local_rank: NotRequired[int]


class MetricEvent(EventEnvelope):
    """`step`, and whichever numbers the script reports (loss, throughput, lr, ...): one rank's own."""

    type: Literal["metric"]
    step: int
    loss: NotRequired[float]
    throughput: NotRequired[float]
    lr: NotRequired[float]
    # What the job's progress folds besides (jobs/control/rates.py): the script's declared total, and
    # the rank's samples per second when its throughput counts something else.
    total_steps: NotRequired[int]
    samples_per_second: NotRequired[float]


class GpuUse(TypedDict):
    """One GPU of the node, as NVML reads it (supervisor/gpu_use.py)."""

    index: int  # NVML's, as the machine's capabilities number its GPUs
    utilization_percent: float
    memory_used_mb: float  # by every process on the GPU
    memory_total_mb: float


class ResourceEvent(EventEnvelope):
    """What a node's rank processes use (node/proctree.py), and its GPUs' use where the machine
    has NVML (no `gpus` field where it has not)."""

    type: Literal["resource"]
    cpu_percent: float
    rss_mb: float
    processes: int
    gpus: NotRequired[list[GpuUse]]


class ManifestFile(TypedDict):
    path: str  # under the checkpoint's step folder
    size: int
    sha256: str
    holders: NotRequired[list[str]]  # a memory checkpoint's: the machines whose agents hold the file


# What a save cost the training loop. (`async` is a keyword: no class can name the field.)
SaveTiming = TypedDict("SaveTiming", {
    "async": bool,
    "blocking_seconds": float,  # the longest any rank was held, waiting for the previous save included
    "background_seconds": float | None,  # rank 0's, from handing the save to its thread; null: synchronous
})


class Manifest(TypedDict):
    """A committed checkpoint's manifest.json (sdk/checkpoint): what a resume reads, and what its
    `checkpoint` event carries for the control plane's list of the job's checkpoints."""

    format: str  # "torchyard-checkpoint/1"
    job_id: int | str | None  # the job's id (a name outside Torchyard; null: none)
    attempt: int
    step: int
    epoch: int | None
    strategy: str  # the job's distributed.strategy
    backend: str | None  # the process group's; null for a single process
    optimizer_state: bool  # the state holds an optimizer's
    rng_state: bool  # ... and random generators' states
    world_size: int
    sharded: bool
    layout: Literal["torch.save", "torch.distributed.checkpoint"]
    files: list[ManifestFile]
    total_bytes: int
    torch_version: str
    created_at: str  # ISO 8601
    save: SaveTiming
    metadata: dict[str, Any]  # the script's own (sdk.save_checkpoint(metadata=...)), any JSON
    # "memory": held in agents' memory (checkpointing.memory), its URI memory://job-<id>/step-<n>;
    # absent: the store's (disk/S3).
    tier: NotRequired[Literal["memory"]]


class CheckpointEvent(EventEnvelope):
    type: Literal["checkpoint"]
    step: int
    uri: str
    manifest: NotRequired[Manifest]


class ArtifactFile(TypedDict):
    path: str
    uri: str
    size: int
    sha256: str


class ArtifactEvent(EventEnvelope):
    """Files a node collected from its output directory into the store (up to 200 an event)."""

    type: Literal["artifact"]
    files: list[ArtifactFile]


class LinkPair(TypedDict):
    """One pair of the job's nodes on one network (node ranks a < b in ring order: a probed b)."""

    network: str  # "10.0.1.0/24"
    a: int
    b: int
    mb_per_s: NotRequired[float]  # what b received over the burst, MB/s
    latency_ms: NotRequired[float]  # the median TCP round trip of a few one-byte pings
    bytes: NotRequired[int]
    error: NotRequired[str]  # it could not be measured, in the kernel's words
    flagged: bool  # below half the median of every pair on every network


class LinkNetwork(TypedDict):
    """A network every node of the job has an address on."""

    network: str
    interfaces: dict[str, str]  # node rank -> the node's interface on it
    slowest_mb_per_s: float | None
    latency_ms: float | None  # the median of its pairs'
    usable: bool  # every pair was measured on it
    registered: bool  # the master's registered address is on it
    chosen: bool


class LinkReport(TypedDict):
    """The link matrix of a job's machines, measured by its preflight (supervisor/links.py)."""

    seconds: float
    machines: dict[str, str]  # node rank -> machine name
    networks: list[LinkNetwork]
    pairs: list[LinkPair]
    median_mb_per_s: float | None
    chosen: str  # the network the job's traffic is pinned to; "": the routed default
    addresses: dict[str, str]  # machine name -> its address on the chosen network
    master_address: str
    summary: str


class PreflightPeer(TypedDict):
    hostname: str | None
    address: str | None
    interface: str | None


class PreflightEvent(EventEnvelope):
    """A node's preflight before torchrun: reached the master (or heard every node), versions agree;
    the master's carries the link matrix when the links were measured."""

    type: Literal["preflight"]
    ok: bool
    error: NotRequired[str]
    role: NotRequired[Literal["master", "node"]]
    interface: NotRequired[str]
    hostname: NotRequired[str]
    master: NotRequired[str]
    local_address: NotRequired[str]
    connect_ms: NotRequired[float]
    python: NotRequired[str]
    torch: NotRequired[str]
    waited_s: NotRequired[float]
    warm: NotRequired[bool]
    peers: NotRequired[dict[str, PreflightPeer]]  # the master's: every other node, by node rank
    seconds: NotRequired[float]
    links: NotRequired[LinkReport]


class StalledEvent(EventEnvelope):
    """A rank whose step stopped advancing, with its Python stack taken from outside (py-spy)."""

    type: Literal["stalled"]
    step: int
    stalled_for: float
    timeout: float
    # How that deadline was set: "auto: 2 x the p95 step time (0.21 s over the last 64 steps), at
    # least 15 s", the job's own stall_timeout, or the fixed one for a rank that reports no steps.
    timeout_basis: NotRequired[str]
    process_state: str
    last_line: str
    stack: str
    hostname: str
    on_stall: Literal["report", "recover"]
    pid: NotRequired[int | None]  # the rank's process, when found
    # The collective frame the main thread waits in; "" outside any; null or absent: no stack read.
    waits_in: NotRequired[str | None]
    frame: NotRequired[str | None]  # the main thread's innermost Python frame
    # True: a rank that reports no steps printed and reported nothing, used no CPU and had every thread
    # waiting in the kernel for `stalled_for` s (`step` is then 0).
    silent: NotRequired[bool]


class RankStack(TypedDict):
    rank: int
    pid: int
    process_state: str  # psutil's word: "running", "sleeping", "stopped", ...
    stack: str  # every thread's Python stack, as py-spy dumps it
    # The collective frame the main thread waits in; "" outside any; null: no stack read.
    waits_in: str | None
    frame: str | None  # the main thread's innermost Python frame


class StacksEvent(EventEnvelope):
    """Every rank's Python stack on one node at one moment, read from outside (py-spy) when someone
    asked (`torchyard stacks JOB`, the job page's Stacks button): `request` names the asking."""

    type: Literal["stacks"]
    request: str
    ranks: list[RankStack]
    hostname: str


class RankPace(TypedDict):
    """One rank over a pace window (supervisor/pace.py)."""

    step_s: float  # wall seconds per step: in synchronous training every rank's
    own_share: float  # the share of it not spent waiting on its peers
    own_step_s: float  # step_s x own_share: the rank's own time per step
    steps: int
    stopped: float  # share of the window its process was stopped (SIGSTOP, a debugger)
    cpu_wait: NotRequired[float]  # share of the window it was runnable without a CPU
    throttled: NotRequired[int]  # times its cgroup's CPU quota throttled it


class OtherProcess(TypedDict):
    pid: int
    name: str
    cpu: float  # CPUs it used over the window (1.0: one whole CPU)


class PaceHost(TypedDict):
    cpus: int
    steal: NotRequired[float]  # the machine's CPU steal over the window, a share of all its CPUs
    # When a rank waited for a CPU: the busiest processes outside the job.
    others: NotRequired[list[OtherProcess]]


class PaceEvent(EventEnvelope):
    """A node's ranks' pace over a window, for the control plane's straggler watch."""

    type: Literal["pace"]
    window_s: float
    ranks: dict[str, RankPace]
    host: PaceHost


class StragglerEvent(EventEnvelope):
    """The control plane named a rank much slower than the others (`named`), or it keeps up again
    (`cleared`); `summary` says so in words."""

    type: Literal["straggler"]
    state: Literal["named", "cleared"]
    summary: str
    machine: str | None
    own_step_s: float
    median_s: float | None
    policy: Literal["report", "replace"]
    ratio: NotRequired[float | None]
    step_s: NotRequired[float | None]
    slow_since: NotRequired[float | None]
    evidence: NotRequired[str]
    replace: NotRequired[str]


class ResultEvent(EventEnvelope):
    """A function job's rank returned or raised (GET /api/jobs/{id}/results holds the result): what
    the rank left (function_results.ResultFile), its pickle stored at `uri`."""

    type: Literal["result"]
    ok: bool
    size: NotRequired[int]
    repr: NotRequired[str]
    error_type: NotRequired[str]
    error: NotRequired[str]
    traceback: NotRequired[str]
    raised_at: NotRequired[float | None]
    peer_failure: NotRequired[bool | None]
    sha256: NotRequired[str]
    uri: NotRequired[str]  # "": nothing stored (it raised something that cannot be pickled, or too much)


# Payloads that may carry more keys than they name (a metric: whatever numbers the script reports).
OPEN_PAYLOADS = frozenset({"MetricEvent"})

StateEvent = JobStateEvent | NodeStateEvent
JobEvent = (StateEvent | LogEvent | MetricEvent | ResourceEvent | CheckpointEvent | ArtifactEvent | PreflightEvent
            | StalledEvent | StacksEvent | PaceEvent | StragglerEvent | ResultEvent)


class AppliedEvent(Protocol):
    """A stored event as ingest hands it to the appliers the control plane's apps register for its
    type (the server's streaming.bulk.StoredEvent, jobs.registries.EventApplier): its row's columns
    (the envelope, the id it was stored under) and `event()`, the event as its producer wrote it."""

    pk: int
    job_id: int
    node_id: int | None
    attempt: int
    node_rank: int | None
    rank: int | None
    type: str
    ts: datetime

    def event(self) -> JobEvent:
        """The event: its payload under its envelope (`ts` in epoch seconds), built at each call."""
        ...


# --- /api/jobs/{job_id}/stream --------------------------------------------------------------------
class JobMessage(TypedDict):
    type: Literal["job"]
    job: JobDetail


class HistoryMessage(TypedDict):
    """Before a replay that opened on each rank's tail: below `logs_before` are lines it left for
    GET /api/jobs/{id}/logs?before= to page (null: none)."""

    type: Literal["history"]
    logs_before: int | None
    lines_per_rank: int
    last_id: int


class EventsFrame(TypedDict):
    """`last` is its last event's id, `prev` the id of the job's event before its first (null when
    unknown): a client whose cursor is below `prev` missed events (resume with ?after=<cursor>)."""

    type: Literal["events"]
    prev: int | None
    last: int
    count: int
    replay: NotRequired[bool]
    events: list[JobEvent]


class ReplayedMessage(TypedDict):
    type: Literal["replayed"]
    last_id: int


class ErrorMessage(TypedDict):
    type: Literal["error"]
    detail: str


JobStreamMessage = JobMessage | HistoryMessage | EventsFrame | ReplayedMessage | ErrorMessage


# --- /api/cluster/stream --------------------------------------------------------------------------
class MachinesMessage(TypedDict):
    type: Literal["machines"]
    machines: list[Machine]


class JobsMessage(TypedDict):
    type: Literal["jobs"]
    jobs: list[JobSummary]


class JobsChangedMessage(TypedDict):
    """The latest summary of each job that changed, at most every half second (coalesced)."""

    type: Literal["jobs_changed"]
    jobs: list[JobSummary]


class QueueMessage(TypedDict):
    """The queue after a pass that changed it: GET /api/queue's answer (your projects' jobs)."""

    type: Literal["queue"]
    jobs: list[QueueEntry]
    total: int


ClusterStreamMessage = MachinesMessage | JobsMessage | JobsChangedMessage | QueueMessage | ErrorMessage

# What the schema publishes under these names (the TypedDicts each under its own class name).
NAMED_UNIONS: dict[str, types.UnionType] = {
    "StateEvent": StateEvent,
    "JobEvent": JobEvent,
    "JobStreamMessage": JobStreamMessage,
    "ClusterStreamMessage": ClusterStreamMessage,
}
# Each WebSocket route and the message union it sends.
ROUTES = {
    "/api/jobs/{job_id}/stream": "JobStreamMessage",
    "/api/cluster/stream": "ClusterStreamMessage",
}
