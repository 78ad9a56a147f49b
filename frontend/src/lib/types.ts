// The REST API's types are generated from the server's OpenAPI schema (api-schema.d.ts, `make
// api-types`); the names here are aliases of the generated ones, for brevity. Only what the schema
// does not describe is written by hand, and says so where it is: the WebSocket streams' messages and
// the payload of each kind of job event (DESIGN.md section 6), built on the schema's EventOut.
import type { components } from './api-schema'

type Schemas = components['schemas']

/** What one project's live jobs take on a machine: counts only, never which jobs. */
export type MachineUsage = Schemas['MachineUsageOut']
export type Machine = Schemas['MachineOut']
export type MachineVolume = Schemas['MachineVolumeOut']
export type MachineCreate = Schemas['MachineIn']
/** A machine just added: its token, shown this once. */
export type MachineCreated = Schemas['MachineWithTokenOut']

export type JobStatus = Schemas['JobStatusEnum']
export type NodeStatus = Schemas['NodeStatusEnum']

/**
 * A job asked to yield its machines to a higher-priority one (its ranks checkpoint and exit), then
 * waiting in the queue again. Plain strings, not JobStatus: the page works the same against a
 * schema (a server) without them, and every check of a status takes any string, so a status the
 * dashboard does not know is shown as it is rather than breaking the page.
 */
export const PREEMPTING: string = 'preempting'
export const PREEMPTED: string = 'preempted'

// Strings, not JobStatus: the preemption statuses (above) are live too.
export const LIVE_JOB_STATUSES: readonly string[] = [
  'queued',
  PREEMPTED,
  'planning',
  'dispatching',
  'running',
  'recovering',
  PREEMPTING,
]
/** A job in one of these waits in the queue (GET /api/queue). */
export const WAITING_JOB_STATUSES: readonly string[] = ['queued', PREEMPTED]

export type JobProgress = Schemas['JobProgressOut']
export type JobSummary = Schemas['JobSummaryOut']
export type JobDetail = Schemas['JobDetailOut']
export type JobNode = Schemas['JobNodeOut']
/** A job's spec as the server stored it, every section filled with its defaults. */
export type JobSpec = Schemas['JobSpecOut']
/** A JobSpec as submitted: the server fills every section left out with its defaults. */
export type JobSpecInput = Schemas['JobSpec']

/** GET /api/queue: the queued jobs you may see, first in line first, each with its place and reason. */
export type Queue = Schemas['QueueOut']
export type QueueEntry = Schemas['QueueEntryOut']
/** PATCH /api/jobs/{id}'s priority: low, normal, high or an integer. */
export type PriorityInput = NonNullable<Schemas['PatchedJobPatchIn']['priority']>

/** GET /api/usage: GPU- and process-hours per project, user or machine, with a series per key. */
export type Usage = Schemas['UsageOut']
export type UsageTotal = Schemas['UsageTotalOut']
export type UsageSeries = Schemas['UsageSeriesOut']
export type UsageGroup = Schemas['ByEnum']

/** A project with your role in it, its priority ceiling, quotas and what its running jobs hold. */
export type Project = Schemas['ProjectOut']
/** PATCH /api/projects/{name}: its admins set the ceiling; staff also the quotas and borrowing. */
export type ProjectSettings = Schemas['PatchedProjectSettingsIn']

/** POST /api/jobs/plan: the dry run's execution plan; also a dispatched job's `plan`. */
export type ExecutionPlan = Schemas['PlanOut']
/** Why the planner left a machine out: "offline", "2 GPUs free, 4 asked", "not needed: ..." (jobs/planner.py). */
export type PlanSkipped = Schemas['PlanSkippedOut']

/**
 * A 400 from the planner (web/errors.py): the spec cannot be placed, and why for each machine.
 * Written by hand: the schema gives the route's 400 as ValidationErrorOut, which this extends.
 */
export type PlanRefusal = ApiErrorBody & {
  detail: string
  resources?: string[]
  skipped: PlanSkipped[]
}

/** GET /api/jobs/{id}/metrics: every metric, one series per name and attempt, on one step grid. */
export type JobMetrics = Schemas['JobMetricsOut']

/** A function job's function (torchyard.fn): `spec.function`, absent for a script. */
export type JobFunction = Schemas['JobFunctionOut']
/** GET /api/jobs/{id}/results: a function job's results, one per rank of its last attempt. */
export type FunctionResults = Schemas['FunctionResultsOut']
/** One rank's return value (its repr) or exception (type, message, remote traceback). */
export type FunctionResult = Schemas['FunctionResultOut']

/**
 * A DRF error body: nested field -> messages, plus `non_field_errors` / `detail` (the schema's
 * ValidationErrorOut, whose field keys are the route's own).
 */
export type ApiErrorBody = Schemas['ValidationErrorOut'] & Record<string, unknown>

// Events (DESIGN.md section 6). The schema's EventOut has the fields every event shares; each kind's
// own fields (its payload, as the node supervisors and the controller write it) are written by hand
// here. `id` is increasing (shared by all jobs): the resume cursor.
type EventBase = Schemas['EventOut']

/**
 * A job's transition (`previous` is null for the first, on submission), or one of its nodes'. A
 * node's own report (its supervisor's, its agent's) says where it is now, without `previous`.
 */
export type StateEvent = EventBase & { type: 'state'; reason: string } & (
    | { scope: 'job'; status: JobStatus; previous: JobStatus | null }
    | { scope: 'node'; status: NodeStatus; previous?: NodeStatus | null }
  )

export type LogEvent = EventBase & {
  type: 'log'
  stream: 'stdout' | 'stderr'
  line: string
}

/** step, and whichever numbers the script reports (loss, throughput, lr, ...). */
export type MetricEvent = EventBase & {
  type: 'metric'
  step: number
  loss?: number
  throughput?: number
  lr?: number
  [metric: string]: unknown
}

/** What a node's rank processes use (supervisor/proctree.py). */
export type ResourceEvent = EventBase & {
  type: 'resource'
  cpu_percent: number
  rss_mb: number
  processes: number
}

export type CheckpointEvent = EventBase & {
  type: 'checkpoint'
  step: number
  uri: string
}

/** Files a node collected from its output directory into the store (up to 200 an event). */
export type ArtifactEvent = EventBase & {
  type: 'artifact'
  files: { path: string; uri: string; size: number; sha256: string }[]
}

/** A node's preflight before torchrun: reached the master (or heard every node), versions agree. */
export type PreflightEvent = EventBase & {
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
export type StalledEvent = EventBase & {
  type: 'stalled'
  step: number
  stalled_for: number
  timeout: number
  process_state: string
  last_line: string
  stack: string
  hostname: string
  on_stall: 'report' | 'recover'
  /** The collective frame the main thread waits in; '' outside any; null or absent: no stack read. */
  waits_in?: string | null
  /** The main thread's innermost Python frame. */
  frame?: string | null
}

/**
 * A function job's rank returned or raised. Only what the page reads is typed: the server records
 * the result first, and GET /api/jobs/{id}/results is where the page reads it from.
 */
export type ResultEvent = EventBase & {
  type: 'result'
  ok: boolean
}

export type JobEvent =
  | StateEvent
  | LogEvent
  | MetricEvent
  | ResourceEvent
  | CheckpointEvent
  | ArtifactEvent
  | PreflightEvent
  | StalledEvent
  | ResultEvent

/** The events of a page of GET /api/jobs/{id}/logs are log events (the schema types them as EventOut). */
export const isLogEvent = (event: EventBase): event is LogEvent => event.type === 'log'

// WebSocket messages: not in the OpenAPI schema (it describes HTTP routes only); written by hand.

/** /api/jobs/{id}/stream */
export type JobStreamMessage = { type: 'events'; events: JobEvent[] } | { type: 'job'; job: JobDetail }

/** /api/cluster/stream */
export type ClusterStreamMessage =
  | { type: 'machines'; machines: Machine[] }
  | { type: 'jobs'; jobs: JobSummary[] }
  // The latest summary of each job that changed, at most every half second (coalesced by the server).
  | { type: 'jobs_changed'; jobs: JobSummary[] }
  // The queue after a queue pass that changed it: GET /api/queue's answer (your projects' jobs).
  | { type: 'queue'; jobs: QueueEntry[]; total: number }
