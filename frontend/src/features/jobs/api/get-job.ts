import { queryOptions, useQuery } from '@tanstack/react-query'
import { api, dataOf } from '../../../lib/api'
import { POLL_FALLBACK_MS } from '../../../lib/cluster-stream-status'
import { LIVE_JOB_STATUSES } from '../../../lib/types'

export const jobQueryKey = (id: number) => ['jobs', 'detail', id] as const

export const getJob = (id: number, signal?: AbortSignal) =>
  dataOf(api.GET('/api/jobs/{job_id}', { params: { path: { job_id: id } }, signal }))

export const jobQueryOptions = (id: number) =>
  queryOptions({ queryKey: jobQueryKey(id), queryFn: ({ signal }) => getJob(id, signal) })

/** `poll`: refetch every few seconds while the job is live (used when its stream is down). */
export const useJob = (id: number, { poll = false }: { poll?: boolean } = {}) =>
  useQuery({
    ...jobQueryOptions(id),
    refetchInterval: (query) =>
      poll && (!query.state.data || LIVE_JOB_STATUSES.includes(query.state.data.status)) ? POLL_FALLBACK_MS : false,
  })
