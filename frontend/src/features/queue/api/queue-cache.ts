import type { QueryClient } from '@tanstack/react-query'
import { queueQueryKey } from '../../../lib/queue-query-key'
import { WAITING_JOB_STATUSES, type JobSummary, type Queue, type QueueEntry } from '../../../lib/types'

/** A `queue` message from the cluster stream: the queue as the server's last pass left it. */
export function setQueue(queryClient: QueryClient, jobs: QueueEntry[], total: number): void {
  queryClient.setQueryData<Queue>(queueQueryKey, { jobs, total })
}

/**
 * Job summaries from the cluster stream: when one enters the queue (queued or preempted, not in the
 * cached queue) or leaves it (in the cached queue, no longer waiting), the queue is asked again at
 * once; the pass that follows sends its own `queue` message too. Nothing happens while no one holds
 * the queue in the cache.
 */
export function noteJobChanges(queryClient: QueryClient, jobs: JobSummary[]): void {
  const queue = queryClient.getQueryData<Queue>(queueQueryKey)
  if (!queue) return
  const queued = new Set(queue.jobs.map((e) => e.id))
  const moved = jobs.some((job) => queued.has(job.id) !== WAITING_JOB_STATUSES.includes(job.status))
  if (moved) void queryClient.invalidateQueries({ queryKey: queueQueryKey })
}

/** After a reconnect: whatever the queue did while the stream was down. */
export function refreshQueue(queryClient: QueryClient): void {
  void queryClient.invalidateQueries({ queryKey: queueQueryKey })
}
