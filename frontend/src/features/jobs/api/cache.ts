import type { QueryClient } from '@tanstack/react-query'
import type { JobDetail, JobEvent, JobStreamMessage, JobSummary, MetricEvent, StateEvent } from '../../../lib/types'
import { jobQueryKey } from './get-job'
import { jobsQueryKey } from './get-jobs'
import { emptyJobEvents, jobEventsQueryKey, mergeJobEvents, withOlderLines, type JobEventsState } from './job-events'

const summaryOf = (job: JobSummary): JobSummary => ({
  id: job.id,
  name: job.name,
  project: job.project,
  status: job.status,
  status_reason: job.status_reason,
  world_size: job.world_size,
  attempt: job.attempt,
  restarts: job.restarts,
  progress: job.progress,
  created_at: job.created_at,
  started_at: job.started_at,
  finished_at: job.finished_at,
  owner: job.owner,
  priority: job.priority,
  queued_at: job.queued_at,
  borrowing: job.borrowing,
})

/** Puts a job into the list (newest first), replacing the row with the same id. */
export function upsertJobSummary(queryClient: QueryClient, job: JobSummary): void {
  const summary = summaryOf(job)
  queryClient.setQueryData<JobSummary[]>(jobsQueryKey, (old) => {
    if (!old) return old
    const index = old.findIndex((j) => j.id === summary.id)
    if (index === -1) return [summary, ...old]
    const next = old.slice()
    next[index] = summary
    return next
  })
  // A cached detail takes the summary's fresher fields and keeps its own nodes/plan/spec.
  queryClient.setQueryData<JobDetail>(jobQueryKey(summary.id), (old) => (old ? { ...old, ...summary } : old))
}

export function setJobDetail(queryClient: QueryClient, job: JobDetail): void {
  queryClient.setQueryData(jobQueryKey(job.id), job)
  upsertJobSummary(queryClient, job)
}

/**
 * Applies state and metric events to a job snapshot. A transition is applied only when it starts
 * from the status we show (`previous`), so replayed history cannot drag the snapshot back; nodes
 * of earlier attempts (ids not in `nodes`) are ignored. The job's own progress is never folded from
 * metric events: it is the server's (every rank's throughput summed, jobs/control/metrics.py), which the
 * stream's `job` message carries whenever it changed.
 */
export function applyEventsToJob(job: JobDetail, events: JobEvent[]): JobDetail {
  let next = job
  const nodeIndex = new Map(job.nodes.map((n, i) => [n.id, i]))
  let nodes = job.nodes
  const editNode = (nodeId: number, edit: (n: JobDetail['nodes'][number]) => JobDetail['nodes'][number]) => {
    const i = nodeIndex.get(nodeId)
    if (i === undefined) return
    if (nodes === job.nodes) nodes = job.nodes.slice()
    nodes[i] = edit(nodes[i])
  }

  for (const event of events) {
    if (event.type === 'state') {
      applyState(event)
    } else if (event.type === 'metric') {
      applyMetric(event)
    }
  }
  if (nodes !== job.nodes) next = { ...next, nodes }
  return next

  function applyState(event: StateEvent) {
    if (event.scope === 'job') {
      if (event.priority != null && event.status === event.previous) {
        // A priority change: the job's reason (why it waits) stays; the change is the timeline's.
        next = { ...next, priority: event.priority }
      } else if (event.previous === next.status) {
        next = { ...next, status: event.status, status_reason: event.reason ?? '' }
      }
    } else if (event.node != null) {
      const { previous, status } = event
      editNode(event.node, (n) => (n.status === previous ? { ...n, status } : n))
    }
  }

  function applyMetric(event: MetricEvent) {
    if (event.node == null || !nodeIndex.has(event.node)) return
    const loss = typeof event.loss === 'number' ? event.loss : null
    const throughput = typeof event.throughput === 'number' ? event.throughput : null
    editNode(event.node, (n) => ({
      ...n,
      progress: {
        // What else the node reported (a Ray node's ports) stays.
        ...n.progress,
        step: event.step,
        loss: loss ?? n.progress?.loss ?? null,
        throughput: throughput ?? n.progress?.throughput ?? null,
      },
    }))
  }
}

function isMessage(value: unknown): value is JobStreamMessage {
  return typeof value === 'object' && value !== null && 'type' in value
}

/**
 * Everything a run of messages from /api/jobs/{id}/stream does to the cache, in order. Consecutive
 * event frames are merged at once: a replay of 200,000 events (200 frames) costs one render per
 * flush, not one per frame.
 */
export function applyJobStreamMessages(queryClient: QueryClient, jobId: number, messages: unknown[]): void {
  let events: JobEvent[] = []
  for (const message of messages) {
    if (!isMessage(message)) continue
    if (message.type === 'job') {
      applyEvents(queryClient, jobId, events)
      events = []
      setJobDetail(queryClient, message.job)
    } else if (message.type === 'history') {
      // Sent before the tail's events: where the older lines begin, for the log view to page.
      applyEvents(queryClient, jobId, events)
      events = []
      const key = jobEventsQueryKey(jobId)
      const state = queryClient.getQueryData<JobEventsState>(key) ?? emptyJobEvents()
      const next = withOlderLines(state, message.logs_before)
      if (next !== state) queryClient.setQueryData(key, next)
    } else if (message.type === 'events' && Array.isArray(message.events)) {
      events = events.length ? events.concat(message.events) : message.events
    }
  }
  applyEvents(queryClient, jobId, events)
}

function applyEvents(queryClient: QueryClient, jobId: number, events: JobEvent[]): void {
  if (!events.length) return
  const key = jobEventsQueryKey(jobId)
  const before = queryClient.getQueryData<JobEventsState>(key) ?? emptyJobEvents()
  const after = mergeJobEvents(before, events)
  if (after === before) return
  queryClient.setQueryData(key, after)
  const fresh = events.filter((e) => e.id > before.lastId)
  const job = queryClient.getQueryData<JobDetail>(jobQueryKey(jobId))
  if (job) {
    const updated = applyEventsToJob(job, fresh)
    if (updated !== job) setJobDetail(queryClient, updated)
  }
}
