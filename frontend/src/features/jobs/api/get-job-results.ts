import { keepPreviousData, queryOptions, useQuery } from '@tanstack/react-query'
import { api, dataOf } from '../../../lib/api'
import type { JobStatus } from '../../../lib/types'

export const getJobResults = (jobId: number, signal?: AbortSignal) =>
  dataOf(api.GET('/api/jobs/{job_id}/results', { params: { path: { job_id: jobId } }, signal }))

/**
 * A function job's results (torchyard.fn), one per rank of its last attempt. Ranks add them as they
 * return, so the key holds the job's status and the result events streamed so far (`seen`): each
 * rank returning, and each transition (a recovery starting a new attempt, the job ending), fetches
 * them again. The previous answer stays on screen meanwhile.
 */
export const jobResultsQueryOptions = (jobId: number, status: JobStatus, seen: number) =>
  queryOptions({
    queryKey: ['jobs', jobId, 'results', status, seen] as const,
    queryFn: ({ signal }) => getJobResults(jobId, signal),
    placeholderData: keepPreviousData,
  })

export const useJobResults = (jobId: number, status: JobStatus, seen: number) =>
  useQuery(jobResultsQueryOptions(jobId, status, seen))

/** One rank's pickled return value (or exception), as the caller unpickles it. */
export const jobResultFileUrl = (jobId: number, rank: number) => `/api/jobs/${jobId}/results/${rank}`
