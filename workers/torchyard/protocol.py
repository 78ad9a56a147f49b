"""The wire contract between the control plane (backend/), the agents and node supervisors (workers/).

Everything that crosses a process boundary is named here once: Celery queue and task names, the Redis
event stream, the environment a launched node sees, the launch payload and the heartbeats; the events
themselves are stream_contract.py's (what the streams' clients read too). The backend imports this
module (it is plain standard library); workers/ never imports the backend.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, NotRequired, TypedDict

from torchyard.stream_contract import EventEnvelope, JobEvent

# --- Celery ---------------------------------------------------------------------------------------
CONTROL_QUEUE = "control"

TASK_LAUNCH_NODE = "torchyard.agent.launch_node"
TASK_STOP_NODE = "torchyard.agent.stop_node"
TASK_WARM_CACHES = "torchyard.agent.warm_caches"
# Sent to a machine's queue when the machine is deleted: its agent stops its worker and exits.
TASK_SHUTDOWN = "torchyard.agent.shutdown"
# Sent to a quarantined machine's queue when its probation is over: its agent runs its health check
# (agent/health.py) and POSTs the result to HEALTH_PATH with its machine token.
TASK_HEALTH_CHECK = "torchyard.agent.health_check"
# `torchyard stacks JOB`: each live node's agent reads every rank's Python stack (py-spy) and
# publishes them as one STACKS event of the node.
TASK_DUMP_STACKS = "torchyard.agent.dump_stacks"
HEALTH_PATH = "/api/agent/health"
# Sent to each machine of a job that kept memory checkpoints (checkpointing.memory) when the job ends:
# its agent frees what it holds for the job (agent/memory.py).
TASK_FREE_MEMORY = "torchyard.agent.free_memory"


class StacksNode(TypedDict):
    node_rank: int
    machine: str


class StacksRequested(TypedDict):
    """POST /api/jobs/{id}/stacks (StacksRequestedOut): `request` names the `stacks` events that will
    answer, one per node asked."""

    request: str
    nodes: list[StacksNode]


class CheckpointCadence(TypedDict):
    """`checkpointing.every_n_steps: auto`: how often the job's machines fail, as the control plane
    estimates it from their history (jobs/control/cadence.py), and that history in words. The SDK
    measures what a save costs and picks the interval (sdk/checkpoint/cadence.py)."""

    mtbf_seconds: float
    why: str


class HealthCheck(TypedDict):
    name: str
    ok: bool
    detail: str
    seconds: float


class HealthReport(TypedDict):
    """What an agent POSTs to HEALTH_PATH: whether every check passed, and each check."""

    ok: bool
    checks: list[HealthCheck]


class AgentMachine(TypedDict):
    id: int
    name: str
    host: str


class AgentConfig(TypedDict):
    """What GET /api/agent/config answers an agent started with `--server URL --token T`."""

    machine: AgentMachine
    redis_url: str  # the broker and event stream it connects to (with a user of its own under ACLs)
    storage_url: str
    ca_pem: str  # the authority signing a rediss:// redis_url's certificate; "": the system's do


# The job's membership changed (a node of the attempt started running, or ended): the agent writes
# it as PEERS_FILE into that node's run directory, where the SDK's peers() reads it.
TASK_UPDATE_PEERS = "torchyard.agent.update_peers"
PEERS_FILE = "peers.json"


class MemberNode(TypedDict):
    node_rank: int
    host: str
    machine: str
    status: str  # the node's (JobNode.Status); "" where only the plan is known


class Membership(TypedDict):
    """An attempt's nodes as TASK_UPDATE_PEERS sends them and PEERS_FILE holds them (sdk.peers()).
    `version` only grows: a node's part moves up as it runs, then ends."""

    version: int
    nodes: list[MemberNode]  # in node-rank order

# Lossless preemption: the controller asks a node to checkpoint and yield. The agent writes
# PREEMPT_FILE ({"grace": seconds, "reason": ..., "at": epoch}) into the node's run directory; the
# ranks see it (sdk.preemption_requested(), a stat of ENV_PREEMPT_FILE), the supervisor stops the
# node once the grace is over (never while a checkpoint commits: COMMITTING_PREFIX markers).
TASK_PREEMPT_NODE = "torchyard.agent.preempt_node"
PREEMPT_FILE = "preempt-requested"


class PreemptRequest(TypedDict, total=False):
    """What PREEMPT_FILE holds ({} where nothing was asked)."""

    grace: float  # seconds the node has to checkpoint and yield
    reason: str
    at: float  # epoch seconds: when it was asked

# Written by a rank that yields (sdk.yield_for_preemption) after its checkpoint committed.
YIELDED_FILE = "preempt-yielded"


class Yielded(TypedDict, total=False):
    """A line of YIELDED_FILE ({} for a line that is not one: the rank yielded all the same)."""

    rank: int
    step: int | None  # the step it checkpointed at
    ts: float

# committing-<rank>: a rank is inside a checkpoint save (sdk.preemption.committing()).
COMMITTING_PREFIX = "committing-"
# returned-<rank>: that rank's script returned 0 and the process is ending (rank_main.exit_now): what is
# left is teardown, which the supervisor ends when it hangs (supervisor/linger.py).
RETURNED_PREFIX = "returned-"
# error-<rank>.json: the Python exception that rank's script raised (rank_main.note_error): its type, message,
# innermost frame of the user's code and last reported step. The node's supervisor reports the first one with
# its final state; the controller retries the same error at the same step only fault_tolerance.retry_same_error
# times.
ERROR_PREFIX = "error-"
# The exit status of a rank that yielded for preemption (the node reports `stopped`, yielded).
YIELD_EXIT_CODE = 83


def machine_queue(machine_id: int | str) -> str:
    """The Celery queue only the agent of one machine consumes."""
    return f"machine.{machine_id}"


def machine_unacked_keys(machine_id: int | str) -> dict[str, str]:
    """Where one machine's agent keeps the tasks it took and has not finished (kombu's Redis
    `broker_transport_options`), apart from the shared `unacked` hash, which holds every client's
    messages (launch payloads included): so a per-agent Redis ACL can allow these keys alone."""
    return {f"{name}_key": f"{name}.{machine_queue(machine_id)}"
            for name in ("unacked", "unacked_index", "unacked_mutex")}


# --- Redis event stream ---------------------------------------------------------------------------
# Producers XADD one JSON document per entry under the field "e"; the controller's ingest loop is the
# only consumer group and the only writer of JobEvent rows, so event ids are assigned in one order.
# The controller's own transitions go to EVENT_STREAM; each machine's agent and node supervisors
# write only to that machine's streams (machine_event_stream, machine_liveness_stream), and ingest
# accepts from them only what concerns that machine and the nodes placed on it.
EVENT_STREAM = "torchyard:events"
EVENT_GROUP = "ingest"
EVENT_FIELD = "e"
# A node supervisor packs the events of one flush into few entries: a JSON array under "b", each
# event as it would be under "e". Packing is what lets a node's log lines reach the database at
# tens of thousands a second (one XADD, one entry to read and acknowledge, one json.loads for many).
PACKED_FIELD = "b"
PACKED_MAX_EVENTS = 500
PACKED_MAX_BYTES = 64 * 1024
# Bounded so a dead controller cannot fill Redis; ~approximate trimming is cheap.
EVENT_STREAM_MAXLEN = 1_000_000
# Heartbeats (nodes' and agents') travel apart: liveness must never wait behind a backlog of log
# lines in the event stream. Only the newest beat matters, so this stream stays short.
LIVENESS_STREAM = "torchyard:liveness"
LIVENESS_STREAM_MAXLEN = 10_000
MACHINE_STREAM_PREFIX = "m"


def machine_event_stream(machine_id: int | str) -> str:
    """The event stream only one machine's agent and supervisors write: `torchyard:events:m<id>`."""
    return f"{EVENT_STREAM}:{MACHINE_STREAM_PREFIX}{machine_id}"


def machine_liveness_stream(machine_id: int | str) -> str:
    """The heartbeats of one machine's agent and supervisors: `torchyard:liveness:m<id>`."""
    return f"{LIVENESS_STREAM}:{MACHINE_STREAM_PREFIX}{machine_id}"


def stream_machine(stream: str | bytes) -> int | None:
    """The machine a per-machine stream belongs to; None for the controller's shared streams."""
    name = stream.decode() if isinstance(stream, bytes) else stream
    _, sep, tail = name.rpartition(":" + MACHINE_STREAM_PREFIX)
    if not sep or not tail.isdigit() or _ not in (EVENT_STREAM, LIVENESS_STREAM):
        return None
    return int(tail)

# Final, so `{"type": protocol.STATE, ...}` is the stream contract's Literal["state"] to mypy.
STATE: Final = "state"
LOG: Final = "log"
METRIC: Final = "metric"
RESOURCE: Final = "resource"
CHECKPOINT: Final = "checkpoint"
ARTIFACT: Final = "artifact"  # the files a node collected from its output directory when it ended
PREFLIGHT: Final = "preflight"  # a node's check of the master's address and port and of its versions
STALLED: Final = "stalled"  # a rank whose step stopped advancing, with its Python stack
STACKS: Final = "stacks"  # every rank's Python stack on one node, asked for by `torchyard stacks JOB`
PACE: Final = "pace"  # each rank's own time per step over a window (supervisor/pace.py): stragglers
STRAGGLER: Final = "straggler"  # the controller's: a rank much slower than the job's median, named or cleared
RESULT: Final = "result"  # a function job's rank returned (or raised): its pickled result, collected into the store
HEARTBEAT: Final = "heartbeat"  # node liveness, never persisted
MACHINE_HEARTBEAT: Final = "machine_heartbeat"  # agent capabilities + load, never persisted
EVENT_TYPES = (STATE, LOG, METRIC, RESOURCE, CHECKPOINT, ARTIFACT, RESULT, PREFLIGHT, STALLED, STACKS, PACE, STRAGGLER,
               HEARTBEAT, MACHINE_HEARTBEAT)

# Node states a supervisor reports (the controller validates every transition).
NODE_PREPARING: Final = "preparing"  # fetching the code bundle, building the environment
NODE_RUNNING: Final = "running"
NODE_COMPLETED: Final = "completed"
NODE_FAILED: Final = "failed"
NODE_STOPPED: Final = "stopped"
# A failed node's final state carries its last this many log lines (`last_lines`), and the failure
# reason quotes all of them: a fault handler's thread stacks come after the error that explains
# them and must not push it out.
FAILURE_LOG_LINES = 20


def _compact_json_encoder() -> Callable[[Any], str]:
    """json.dumps(value, separators=(",", ":"), default=str), about twice as fast on small events:
    the C encoder built once (json.dumps and JSONEncoder.encode build one per call)."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return json.JSONEncoder(separators=(",", ":"), default=str).encode
    encoder = make(None, str, json.encoder.encode_basestring_ascii, None, ":", ",", False, False, True)
    return lambda value: "".join(encoder(value, 0))


encode_json = _compact_json_encoder()


class NodeHeartbeat(EventEnvelope):
    """A node supervisor's liveness (to the liveness stream, never stored): only the newest counts."""

    type: Literal["heartbeat"]
    status: str  # the supervisor's state (supervisor/states.py)
    pid: int | None  # the launcher's, once started
    pending_events: int
    uptime_s: NotRequired[float]
    dropped_events: NotRequired[int]
    steps: NotRequired[dict[str, list[float]]]  # rank -> [its last step, seconds since it advanced]


class AddressInfo(TypedDict):
    """An IPv4 address of a machine (node/network.py Address): its capabilities list them, and a node
    offers them in its preflight hello for the job's link measurement (supervisor/links.py)."""

    interface: str
    address: str
    network: str  # "10.0.1.0/24"
    speed_mbit: int  # the link speed the kernel reports (0: it does not say)


class GpuInfo(TypedDict):
    """A GPU of a machine, as its agent reports it (NVML's, or declared with `--gpus`)."""

    index: int  # NVML's
    name: str
    memory_mb: int


class VolumeReport(TypedDict):
    """A volume an agent declares (`--volume NAME=PATH`), as its heartbeat reports it."""

    name: str
    path: str
    exists: bool  # a directory here
    total_bytes: int | None  # its filesystem's (None: it does not exist)
    free_bytes: int | None
    storage_class: NotRequired[str]


class Capabilities(TypedDict):
    """What a machine has (agent/capabilities.py), kept as Machine.capabilities."""

    cpu_count: int
    memory: int  # bytes
    disk_space: int  # bytes free under the agent's work dir
    gpu_count: int
    gpu_memory: int  # MB, over its GPUs
    gpus: list[GpuInfo]
    gpus_declared: NotRequired[bool]  # `--gpus`: the GPUs scheduled are the declared ones...
    gpus_detected: NotRequired[list[GpuInfo]]  # ... and these what NVML sees
    gpu_warnings: NotRequired[list[str]]  # how the two differ
    volumes: list[VolumeReport]
    interfaces: list[AddressInfo]  # its IPv4 addresses (node/network.py)
    # The training Python's versions (agent/main.py): the plan shows whether a job's machines agree.
    python_version: NotRequired[str]
    torch_version: NotRequired[str]
    # The port of its agent's memory-checkpoint store (agent/memory.py; `torchyard agent --memory-port`).
    memory_port: NotRequired[int]


class Load(TypedDict):
    """What a machine is doing, per heartbeat."""

    cpu_usage: float  # percent
    memory_usage: float  # percent
    gpu_usage: list[float]  # percent, by position in Capabilities.gpus


class MachineHeartbeat(TypedDict):
    """An agent's liveness, with what its machine has and does (agent/main.py heartbeat_once):
    machines.services.machine_record_heartbeats keeps it on the machine."""

    type: Literal["machine_heartbeat"]
    machine: int
    token: str  # the machine token: ingest believes a beat only with it
    hostname: str
    agent_version: str
    capabilities: Capabilities
    cache: dict[str, list[str]]  # agent/warm.py cache_summary: the bundles and environments ready
    load: Load
    running: list[RunningNode]
    host: NotRequired[str]  # `torchyard agent --addr`
    ts: float


class RunningNode(TypedDict):
    """A node supervisor alive on the machine (agent/runs.py running_nodes)."""

    run_dir: str
    pid: int


# What a producer writes to an event stream: the contract's events and the heartbeats.
StreamEvent = JobEvent | NodeHeartbeat | MachineHeartbeat


def encode_event(event: StreamEvent) -> dict[Any, Any]:
    return {EVENT_FIELD: encode_json(event)}


def decode_event(fields: dict[Any, Any]) -> dict[str, Any]:
    raw = fields.get(EVENT_FIELD) or fields.get(EVENT_FIELD.encode())
    if raw is None:
        raise ValueError("stream entry has no event field")
    if isinstance(raw, bytes):
        raw = raw.decode()
    event = json.loads(raw)
    if not isinstance(event, dict):
        raise ValueError("a stream entry's event must be an object")
    return event


def pack_events(events: Sequence[StreamEvent], *, max_events: int = PACKED_MAX_EVENTS,
                max_bytes: int = PACKED_MAX_BYTES) -> list[tuple[int, dict[Any, Any]]]:
    """The fields of the entries that carry `events` in order, each with how many events it holds:
    at most max_events, and about max_bytes (told by the length of their lines: an event is a few
    hundred bytes besides), each entry encoded in one call."""
    entries: list[tuple[int, dict[Any, Any]]] = []
    start, size = 0, 0
    for index, event in enumerate(events):
        line = event.get("line")
        weight = 200 + (len(line) if isinstance(line, str) else 0)
        if index > start and (index - start >= max_events or size + weight > max_bytes):
            entries.append((index - start, {PACKED_FIELD: encode_json(events[start:index])}))
            start, size = index, 0
        size += weight
    if start < len(events):
        entries.append((len(events) - start, {PACKED_FIELD: encode_json(events[start:])}))
    return entries


def decode_entry(fields: dict[Any, Any]) -> list[dict[str, Any]]:
    """The events of one stream entry: one under "e", or several packed under "b". What a producer
    wrote, unchecked: ingest reads each field defensively (a JSON object of any keys)."""
    raw = fields.get(PACKED_FIELD) or fields.get(PACKED_FIELD.encode())
    if raw is None:
        return [decode_event(fields)]
    events = json.loads(raw)
    if not isinstance(events, list) or not all(isinstance(e, dict) for e in events):
        raise ValueError("a packed stream entry must hold a list of events")
    return events


# --- Environment of every launched process -------------------------------------------------------
ENV_JOB_ID = "TORCHYARD_JOB_ID"
ENV_ATTEMPT = "TORCHYARD_ATTEMPT"
ENV_NODE_RANK = "TORCHYARD_NODE_RANK"
# The node's run directory on its machine. With the job id it names the processes of one node
# even when several control planes (or test stacks) share a machine and their job ids collide.
ENV_RUN_DIR = "TORCHYARD_RUN_DIR"
# A Unix datagram socket the supervisor reads SDK events from (metrics, checkpoints).
ENV_EVENT_SOCKET = "TORCHYARD_EVENT_SOCKET"
# Path of a JSON file: {"hyperparameters": {...}, "scaling": {...}, "distributed": {...},
# "checkpointing": {...}, "compression": {...}, "resources": {...}} as planned for this job.
ENV_CONFIG = "TORCHYARD_CONFIG"
# Where this job's checkpoints live: file:///abs/dir or s3://bucket/prefix (one folder per job).
ENV_CHECKPOINT_URL = "TORCHYARD_CHECKPOINT_URL"
# Path of the node's PREEMPT_FILE (which exists once the node is asked to yield).
ENV_PREEMPT_FILE = "TORCHYARD_PREEMPT_FILE"
# URI of the committed manifest.json to resume from (empty: start fresh).
ENV_RESUME_MANIFEST = "TORCHYARD_RESUME_MANIFEST"
# The job's memory-checkpoint key (checkpointing.memory): what the agents holding them ask of every
# request (agent/memory.py). In the ranks' environment, not in their config file.
ENV_MEMORY_KEY = "TORCHYARD_MEMORY_KEY"
# A memory checkpoint's manifest URI: memory://job-<id>/step-<n> (it has no file of its own).
MEMORY_SCHEME = "memory://"
# "gloo" or "nccl", as planned.
ENV_DIST_BACKEND = "TORCHYARD_DIST_BACKEND"
# What a job writes here is collected into the store as artifacts when its node ends (one folder
# per node; default `outputs/` in the node's working directory).
ENV_OUTPUT_DIR = "TORCHYARD_OUTPUT_DIR"
# Launchers other than torchrun: the node's rank and count, as torchrun's own flags name them.
ENV_NODE_RANK_PLAIN = "NODE_RANK"
ENV_NNODES = "NNODES"
# The job's node addresses in node-rank order, comma-separated (the plan's; sdk.peers() waits for them).
ENV_PEERS = "TORCHYARD_PEERS"
# A function job: where each rank writes its pickled return value (or exception).
ENV_RESULTS_DIR = "TORCHYARD_RESULTS_DIR"
ENV_FUNCTION_PAYLOAD = "TORCHYARD_FUNCTION_PAYLOAD"
ENV_RESULT_MAX_BYTES = "TORCHYARD_RESULT_MAX_BYTES"
# A volume of the job: TORCHYARD_VOLUME_<NAME> (upper-cased, - and . as _) is its path on this machine.
ENV_VOLUME_PREFIX = "TORCHYARD_VOLUME_"
# A volume's name, as machines declare it and jobs ask for it (supervisor/volumes.py).
VOLUME_NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,62}$"


class RayPlan(TypedDict):
    """What a Ray node's runner (torchyard.ray_node) reads from its run directory (ray.json), as the
    supervisor writes it (supervisor/ray_launch.py build_plan)."""

    head: bool
    address: str  # HOST:PORT of the head's GCS
    nnodes: int
    quorum_timeout: float  # seconds the head waits for every node (and a worker for the head)
    python: str
    ray_start: list[str]  # the `ray start --block` argv
    driver: list[str] | None  # the head's: the job's own script
    temp_dir: str


# --- Machine tokens -------------------------------------------------------------------------------
def make_machine_token(machine_id: int, secret: str) -> str:
    """A machine token names its machine, so an agent needs nothing else to find its queue."""
    return f"{machine_id}.{secret}"


def parse_machine_token(token: str) -> tuple[int, str]:
    """Split a machine token; raises ValueError with a readable message when malformed."""
    head, sep, secret = token.strip().partition(".")
    if not sep or not head.isdigit() or len(secret) < 16:
        raise ValueError("malformed machine token: expected '<machine id>.<secret>'")
    return int(head), secret


# --- Launch payload -------------------------------------------------------------------------------
class PlannedPeer(TypedDict):
    """A node of the plan, as a launch names it."""

    node_rank: int
    host: str  # its machine's address
    machine: str  # its machine's name


class BundleRef(TypedDict, total=False):
    """An uploaded bundle as a launch names it (its `code`, a function's `payload`) and as a cache
    warming asks for it: every key or none (`{}`: a built-in recipe, no code to fetch)."""

    bundle: str  # its sha256
    size: int | None  # the archive's bytes (null: not known)
    uri: str  # where the store keeps it
    grant: str  # a hot spare's warming: the server's leave to fetch it before any node is placed there


class NodeVolume(TypedDict):
    """A volume of the job as this node's machine has it (supervisor/volumes.py)."""

    name: str
    path: str  # on this machine
    mount_path: str
    access_mode: str  # "ReadWriteMany" or "ReadWriteOnce"
    machine: str  # its name, for the preflight's messages


class FunctionLaunch(TypedDict, total=False):
    """A Python function job's part of a launch (supervisor/functions.py); `{}` for any other job."""

    payload: BundleRef  # the pickled function and its arguments, an uploaded bundle
    name: str  # its qualified name
    result_max_bytes: int
    results_url: str  # the job's folder of the store that each rank's result goes to


class LinksChoice(TypedDict, total=False):
    """The network an earlier attempt's preflight pinned the job to, on these machines."""

    network: str  # "10.0.1.0/24"
    master_address: str  # the master's address on it


class MemoryHolder(TypedDict):
    """A machine whose agent holds memory checkpoints (agent/memory.py): its name, its registered host,
    its memory store's port and its addresses (the node reaches it on the network its job chose)."""

    machine: str
    host: str
    port: int
    addresses: list[AddressInfo]


class MemoryResume(TypedDict):
    """A recovery from a memory checkpoint: its committed manifest and the machines still holding it,
    this node's own machine first."""

    manifest: dict[str, Any]  # stream_contract.Manifest, with "tier": "memory"
    holders: list[MemoryHolder]


class MemoryLaunch(TypedDict, total=False):
    """checkpointing.memory for one node: the job's key, its budget per machine, the cadence, and where
    the node's saves go (its own machine, then `replicas` buddies on other machines); with `resume`
    when this attempt resumes from memory. Empty when the job keeps no memory checkpoints."""

    key: str
    budget: int
    every_n_steps: int
    replicas: int
    holders: list[MemoryHolder]
    resume: MemoryResume


@dataclass
class NodeLaunch:
    """Everything one agent needs to start one node of one attempt of a job."""

    job_id: int
    attempt: int
    node_id: int  # JobNode primary key: events carry it
    node_rank: int
    nnodes: int
    nproc_per_node: int
    world_size: int
    master_addr: str
    master_port: int
    entrypoint: str  # path relative to the code root (built-in recipes: "examples/mlp_ddp.py")
    args: list[str] = field(default_factory=list)
    module: str = ""  # run `python -m module` instead of the entrypoint script
    # The user's code; empty for the built-in recipes.
    code: BundleRef = field(default_factory=lambda: BundleRef())
    pip: list[str] = field(default_factory=list)  # runtime.pip, installed with the bundle's requirements
    env: dict[str, str] = field(default_factory=dict)
    # JobSpec secret_env, in clear: given to the ranks like env, never logged, and every value is
    # replaced by *** in the log lines the node publishes. Not in repr(); launch.json holding it is 0600.
    secret_env: dict[str, str] = field(default_factory=dict, repr=False)
    config: dict[str, Any] = field(default_factory=dict)
    checkpoint_url: str = ""
    resume_manifest: str = ""
    backend: str = "gloo"
    heartbeat_interval: float = 2.0
    # fault_tolerance.stall_timeout (None: auto, 2x the job's p95 step time, at least 15 s) and on_stall
    # ("report": a `stalled` event; "recover": also fail the node, so the job recovers).
    stall_timeout: float | None = None
    on_stall: str = "report"
    # Seconds between `pace` events (each rank's own step time, for straggler detection); 0: none.
    pace_every: float = 10.0
    # fault_tolerance.exit_grace: how long a rank may outlive every other rank's exit 0 (supervisor/linger.py).
    exit_grace: float = 30.0
    # distributed.launcher: "torchrun" (default), "none" (the entrypoint once per node as a plain
    # process) or "command" (`command`, an argv list, once per node). Every one gets the job's peers.
    launcher: str = "torchrun"
    command: list[str] = field(default_factory=list)
    # The plan's nodes in node-rank order: TORCHYARD_PEERS and what the SDK's peers() starts from.
    peers: list[PlannedPeer] = field(default_factory=list)
    # The network the job's traffic is pinned to, chosen by an earlier attempt's preflight on these
    # machines; empty: the preflight measures the links and chooses (supervisor/links.py).
    links: LinksChoice = field(default_factory=lambda: LinksChoice())
    # The job's volumes as this node's machine has them.
    volumes: list[NodeVolume] = field(default_factory=list)
    # A Python function job's payload and where its results go; empty otherwise.
    function: FunctionLaunch = field(default_factory=lambda: FunctionLaunch())
    # checkpointing.memory: where this node's memory checkpoints go, and the one it resumes from.
    memory: MemoryLaunch = field(default_factory=lambda: MemoryLaunch(), repr=False)
    # Filled in by the agent from its own settings: where the event stream lives, how to fetch a
    # bundle from the server, the Python the ranks run with, and the machine's cache folder.
    redis_url: str = ""
    server_url: str = ""
    machine_token: str = ""
    python: str = ""
    cache_dir: str = ""

    @property
    def rank_start(self) -> int:
        return self.node_rank * self.nproc_per_node

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NodeLaunch:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})
