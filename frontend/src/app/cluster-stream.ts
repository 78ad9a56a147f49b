import type { QueryClient } from '@tanstack/react-query'
import { machinesQueryKey } from '../features/machines/api/get-machines'
import { jobsQueryKey } from '../features/jobs/api/get-jobs'
import { upsertJobSummary } from '../features/jobs/api/cache'
import { noteJobChanges, refreshQueue, setQueue } from '../features/queue/api/queue-cache'
import type { ClusterStreamMessage } from '../lib/types'

/** Everything a message on /api/cluster/stream does to the cache. */
export function applyClusterMessage(queryClient: QueryClient, message: unknown): void {
  if (typeof message !== 'object' || message === null || !('type' in message)) return
  const msg = message as ClusterStreamMessage
  if (msg.type === 'machines' && Array.isArray(msg.machines)) {
    queryClient.setQueryData(machinesQueryKey, msg.machines)
  } else if (msg.type === 'jobs' && Array.isArray(msg.jobs)) {
    // The snapshot the server sends on every (re)connect: nothing missed while away survives it.
    queryClient.setQueryData(jobsQueryKey, msg.jobs)
    refreshQueue(queryClient)
  } else if (msg.type === 'jobs_changed' && Array.isArray(msg.jobs)) {
    for (const job of msg.jobs) upsertJobSummary(queryClient, job)
    noteJobChanges(queryClient, msg.jobs)
  } else if (msg.type === 'queue' && Array.isArray(msg.jobs)) {
    setQueue(queryClient, msg.jobs, typeof msg.total === 'number' ? msg.total : msg.jobs.length)
  }
}
