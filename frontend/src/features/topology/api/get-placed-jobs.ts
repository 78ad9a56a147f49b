import { useQueries } from '@tanstack/react-query'
import { POLL_FALLBACK_MS } from '../../../lib/cluster-stream-status'
import { PREEMPTING, type JobDetail, type JobSummary } from '../../../lib/types'
import { jobQueryOptions } from '../../jobs/api/get-job'

/** Jobs that hold nodes on machines: the ones the topology draws. */
export const PLACED_JOB_STATUSES: readonly string[] = ['dispatching', 'running', 'recovering', 'stopping', PREEMPTING]

/**
 * The details (with nodes) of every listed job that is placed on machines. The list comes from
 * the cluster stream; a job's nodes do not, so each detail is fetched again every few seconds
 * while it is drawn (shared with the job page's cache entry).
 */
export function usePlacedJobs(jobs: JobSummary[] | undefined): JobDetail[] {
  const placed = (jobs ?? []).filter((j) => PLACED_JOB_STATUSES.includes(j.status))
  return useQueries({
    queries: placed.map((job) => ({ ...jobQueryOptions(job.id), refetchInterval: POLL_FALLBACK_MS })),
    combine: loaded,
  })
}

// Module-level so TanStack Query keeps the combined array while no query changes.
const loaded = (results: { data?: JobDetail }[]): JobDetail[] => results.flatMap((r) => (r.data ? [r.data] : []))
