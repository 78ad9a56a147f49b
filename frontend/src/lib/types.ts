// The API's types are generated from the server's OpenAPI schema (api-schema.d.ts, `make
// api-types`): the REST bodies, and the WebSocket streams' messages, event payloads and close codes
// (the server publishes them from workers/torchyard/stream_contract.py). The names here are aliases
// of the generated ones, for brevity.
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

/** A job status that still changes (the server's LiveJobStatusEnum). */
export type LiveJobStatus = Schemas['LiveJobStatusEnum']
// Every live status, once: a status the server adds or drops fails to compile here.
const LIVE: Record<LiveJobStatus, true> = {
  queued: true,
  preempted: true,
  planning: true,
  dispatching: true,
  running: true,
  recovering: true,
  preempting: true,
  stopping: true,
}
// Strings, not JobStatus: every check of a status takes any string (above).
export const LIVE_JOB_STATUSES: readonly string[] = Object.keys(LIVE)
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
/** Why the planner left a machine out: "offline", "2 GPUs free, 4 asked", "not needed: ..." (jobs/placement/planner.py). */
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

// Events (DESIGN.md section 6): every event is the schema's EventOut (the fields all share; `id` is
// increasing, shared by all jobs: the resume cursor) and its kind's own fields.
type EventBase = Schemas['EventOut']

/** A job's transition or one of its nodes' (a node's own report has no `previous`). */
export type StateEvent = Schemas['StateEvent']
export type LogEvent = Schemas['LogEvent']
/** One rank's step and whichever numbers its script reports (loss, throughput, lr, ...). */
export type MetricEvent = Schemas['MetricEvent']
export type ResourceEvent = Schemas['ResourceEvent']
export type CheckpointEvent = Schemas['CheckpointEvent']
export type ArtifactEvent = Schemas['ArtifactEvent']
export type PreflightEvent = Schemas['PreflightEvent']
export type StalledEvent = Schemas['StalledEvent']
export type StacksEvent = Schemas['StacksEvent']
export type PaceEvent = Schemas['PaceEvent']
/** The control plane named a rank much slower than the others, or it keeps up again. */
export type StragglerEvent = Schemas['StragglerEvent']
export type Straggler = Schemas['StragglerOut']
export type ResultEvent = Schemas['ResultEvent']
export type JobEvent = Schemas['JobEvent']

/** The events of a page of GET /api/jobs/{id}/logs are log events (the schema types them as EventOut). */
export const isLogEvent = (event: EventBase): event is LogEvent => event.type === 'log'

/** /api/jobs/{id}/stream */
export type JobStreamMessage = Schemas['JobStreamMessage']
/** Sent before a replay that opened on each rank's tail (`?history=tail`): where older lines begin. */
export type JobHistoryMessage = Schemas['HistoryMessage']
/** /api/cluster/stream */
export type ClusterStreamMessage = Schemas['ClusterStreamMessage']
/** The streams' close codes that mean "do not retry" (4401: sign in again; 4404: no such thing). */
export type StreamRefusedCloseCode = Schemas['StreamRefusedCloseCode']
/** Fell behind: reconnect at once; the URL's cursor resumes the replay. */
export type StreamResumeCloseCode = Schemas['StreamResumeCloseCode']

/** GET /api/jobs/{id}/goodput: where the job's wall time went, overall and per attempt. */
export type JobGoodput = Schemas['JobGoodputOut']
export type GoodputAttempt = Schemas['GoodputAttemptOut']
/** Seconds per category; they add up to the wall time. */
export type GoodputParts = Schemas['GoodputPartsOut']
export type GoodputCategory = keyof GoodputParts
/** GET /api/usage/goodput: goodput, GPU-hours and cost per project, user or machine. */
export type GoodputRollup = Schemas['GoodputRollupOut']
export type GoodputRollupRow = Schemas['GoodputRollupRowOut']
