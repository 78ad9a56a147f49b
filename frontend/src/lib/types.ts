// Hand-written from the API contract (DESIGN.md section 5/6). To be replaced by a client
// generated from /api/schema/ once the backend publishes it.

export type ISODateTime = string

export interface Me {
  username: string
  is_staff: boolean
  /** The projects this user may submit jobs to. */
  projects?: string[]
}

export type MachineStatus = 'pending' | 'online' | 'busy' | 'draining' | 'offline'

export interface GpuInfo {
  index: number
  name: string
  memory_mb: number
}

export interface MachineCapabilities {
  cpu_count: number
  /** bytes */
  memory: number
  /** bytes */
  disk_space: number
  gpu_count: number
  /** MB */
  gpu_memory: number
  gpus: GpuInfo[]
}

export interface MachineLoad {
  /** percent */
  cpu_usage: number
  /** percent */
  memory_usage: number
  gpu_usage: number[]
}

/** A built-in training script a JobSpec's entrypoint may name (GET /api/recipes). */
export interface Recipe {
  entrypoint: string
  summary: string
}

/** What one project's live jobs take on a machine: counts only, never which jobs. */
export interface MachineUsage {
  project: string
  gpus: number
  processes: number
}

export interface Machine {
  id: number
  name: string
  host: string
  port: number
  status: MachineStatus
  // A machine whose agent has not connected yet reports nothing: treat every field as optional.
  capabilities: Partial<MachineCapabilities>
  current_load: Partial<MachineLoad>
  labels: Record<string, unknown>
  agent_version: string
  last_heartbeat: ISODateTime | null
  created_at: ISODateTime
  usage: MachineUsage[]
}

export interface MachineCreate {
  name: string
  host: string
  /** Kept in the API for DistroML's worker records; nothing listens on it (agents dial out). */
  port?: number
  labels?: Record<string, unknown>
}

export type MachineCreated = Machine & { token: string }

export type JobStatus =
  | 'queued'
  | 'planning'
  | 'dispatching'
  | 'running'
  | 'recovering'
  | 'stopping'
  | 'completed'
  | 'failed'
  | 'stopped'

export const LIVE_JOB_STATUSES: readonly JobStatus[] = [
  'queued',
  'planning',
  'dispatching',
  'running',
  'recovering',
]

export interface JobProgress {
  step: number | null
  total_steps: number | null
  throughput: number | null
  loss: number | null
  eta_seconds: number | null
  /** The control plane's verdict on the current attempt's stalled ranks (jobs/stalls.py). */
  stall?: StallVerdict
}

export interface StallVerdict {
  attempt: number
  kind: 'collective' | 'straggler' | 'rank'
  summary: string
  ranks: Record<string, { step: number; stalled_for: number; process_state: string; machine: string | null; event: number }>
}

export interface JobSummary {
  id: number
  name: string
  status: JobStatus
  status_reason: string
  world_size: number | null
  attempt: number
  progress: JobProgress
  created_at: ISODateTime
  started_at: ISODateTime | null
  finished_at: ISODateTime | null
  owner: string
  project: string
}

export interface JobSpec {
  project?: string
  name: string
  /** A script path inside the code bundle, or a built-in recipe (absent when `module` is given). */
  entrypoint?: string
  module?: string
  code?: { bundle: string; size?: number }
  runtime?: { pip: string[] }
  args: string[]
  env: Record<string, string>
  resources: { nodes: number; procs_per_node: number; gpus_per_node: number; min_gpu_memory: number }
  placement: { policy: 'pack' | 'spread'; machines: string[] }
  distributed: { backend: 'auto' | 'gloo' | 'nccl' }
  hyperparameters: Record<string, unknown>
  scaling: { mode: 'keep_global_batch' | 'scale_global_batch' | 'none' }
  checkpointing: { enabled: boolean; every_n_steps: number; keep: number }
  fault_tolerance: { max_restarts: number; heartbeat_timeout: number }
}

export interface PlanNode {
  node_rank: number
  machine_id: number
  machine_name: string
  host: string
  nproc: number
  rank_start: number
  rank_end: number
}

export interface Plan {
  world_size: number
  master_addr: string
  master_port: number
  backend: string
  nodes: PlanNode[]
  hyperparameters: Record<string, unknown>
  warnings: string[]
}

export type NodeStatus = 'pending' | 'launching' | 'preparing' | 'running' | 'completed' | 'failed' | 'lost' | 'stopped'

export interface JobNode {
  id: number
  attempt: number
  node_rank: number
  /** `id` is null once the machine is removed; name and host are kept from the plan. */
  machine: { id: number | null; name: string; host: string }
  nproc: number
  rank_start: number
  rank_end: number
  /** GPU indexes on the machine (empty for CPU-only nodes). */
  gpus?: number[]
  status: NodeStatus
  exit_code: number | null
  last_heartbeat: ISODateTime | null
  progress: { step: number | null; loss: number | null; throughput: number | null } | null
}

export interface JobDetail extends JobSummary {
  spec: JobSpec
  plan: Plan | null
  master_addr: string
  master_port: number | null
  nodes: JobNode[]
}

// Events (DESIGN.md section 6). `id` is increasing (shared by all jobs): the resume cursor.
interface EventBase {
  id: number
  job: number
  node: number | null
  node_rank: number | null
  rank: number | null
  /** The node supervisor's own number for the event (1, 2, ... per node); null for the controller's. */
  seq?: number | null
  /** 0 for the first launch, +1 per recovery relaunch. */
  attempt?: number
  ts: ISODateTime
}

export interface StateEvent extends EventBase {
  type: 'state'
  scope: 'job' | 'node'
  status: string
  previous: string
  reason: string
}

export interface LogEvent extends EventBase {
  type: 'log'
  stream: 'stdout' | 'stderr'
  line: string
}

export interface MetricEvent extends EventBase {
  type: 'metric'
  step: number
  loss?: number
  throughput?: number
  lr?: number
  [metric: string]: unknown
}

export interface ResourceEvent extends EventBase {
  type: 'resource'
  cpu_percent: number
  memory_mb: number
}

export interface CheckpointEvent extends EventBase {
  type: 'checkpoint'
  step: number
  uri: string
}

/** A node's preflight before torchrun: reached the master (or heard every node), versions agree. */
export interface PreflightEvent extends EventBase {
  type: 'preflight'
  ok: boolean
  error?: string
  role?: 'master' | 'node'
  interface?: string
  hostname?: string
  master?: string
  local_address?: string
  connect_ms?: number
  python?: string
  torch?: string
}

/** A rank whose step stopped advancing, with its Python stack taken from outside (py-spy). */
export interface StalledEvent extends EventBase {
  type: 'stalled'
  step: number
  stalled_for: number
  timeout: number
  process_state: string
  last_line: string
  stack: string
  hostname: string
  on_stall: 'report' | 'recover'
}

export type JobEvent = StateEvent | LogEvent | MetricEvent | ResourceEvent | CheckpointEvent | PreflightEvent | StalledEvent

export type JobStreamMessage =
  | { type: 'events'; events: JobEvent[] }
  | { type: 'job'; job: JobDetail }

export type ClusterStreamMessage =
  | { type: 'machines'; machines: Machine[] }
  | { type: 'jobs'; jobs: JobSummary[] }
  // The latest summary of each job that changed, at most every half second (coalesced by the server).
  | { type: 'jobs_changed'; jobs: JobSummary[] }

/** DRF validation error body: nested field -> messages, plus `non_field_errors` / `detail`. */
export type ApiErrorBody = { detail?: string } & Record<string, unknown>

/** A file a node left in $TORCHYARD_OUTPUT_DIR, collected into the store (GET /api/jobs/{id}/artifacts). */
export interface Artifact {
  id: number
  attempt: number
  node_rank: number
  path: string
  size: number
  sha256: string
  created_at: ISODateTime
}

/** GET /api/jobs/{id}/logs and /events: a page of events, oldest first (`?after=`, `?before=`, `?tail=`). */
export interface EventPage<E extends JobEvent = JobEvent> {
  events: E[]
  /** Pass as `after` for the events that follow. */
  next_after: number
}

/** One bucket of a downsampled metric series: the values reported in its steps, over every rank. */
export interface MetricBucket {
  /** The bucket's first step on the grid. */
  step: number
  first_step: number
  last_step: number
  min: number
  max: number
  mean: number
  count: number
}

/** GET /api/jobs/{id}/metrics: every metric, one series per name and attempt, on one step grid. */
export interface JobMetrics {
  job: number
  /** Every metric name the job reported. */
  names: string[]
  from_step: number | null
  to_step: number | null
  bucket_steps: number | null
  series: { name: string; attempt: number; buckets: MetricBucket[] }[]
}

/** A committed checkpoint manifest (GET /api/jobs/{id}/checkpoints). */
export interface Checkpoint {
  id: number
  job: number
  step: number
  attempt: number
  uri: string
  world_size: number | null
  files: { path: string; size?: number; sha256?: string }[]
  total_bytes: number | null
  committed_at: ISODateTime
  verified: boolean
}

/** Why the planner left a machine out: "offline", "2 GPUs free, 4 asked", "not needed: ..." (jobs/planner.py). */
export interface PlanSkipped {
  machine_id: number
  machine_name: string
  reason: string
}

/** What every node's preflight checks before any rank starts. */
export interface PlanPreflight {
  /** host:port every node must reach. */
  master: string
  /** Each chosen machine's torch and Python versions, by machine name. */
  versions: Record<string, string>
}

/** POST /api/jobs/plan: the dry run's execution plan (PlanOut). Nothing is launched. */
export interface ExecutionPlan extends Plan {
  nnodes: number
  procs_per_node: number
  nodes: (PlanNode & { gpus: number[] })[]
  preflight?: PlanPreflight
  /** Every machine not chosen, with why. */
  skipped?: PlanSkipped[]
}

/** A 400 from the planner (web/errors.py): the spec cannot be placed, and why for each machine. */
export interface PlanRefusal {
  detail: string
  resources?: string[]
  skipped: PlanSkipped[]
}

/** GET /api/tasks/distributed/suggest_machines: online machines in the planner's order. */
export interface MachineSuggestions {
  /** Machine ids, as many as asked for. */
  suggested: number[]
  /** Whether as many machines fit as were asked for. */
  enough: boolean
  machines: Machine[]
}
