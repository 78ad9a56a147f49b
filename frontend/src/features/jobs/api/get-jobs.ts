import { queryOptions, useQuery } from '@tanstack/react-query'
import { api, dataOf } from '../../../lib/api'
import { POLL_FALLBACK_MS, useClusterStreamLive } from '../../../lib/cluster-stream-status'

export const jobsQueryKey = ['jobs', 'list'] as const

export const getJobs = (signal?: AbortSignal) => dataOf(api.GET('/api/jobs', { signal }))

export const jobsQueryOptions = () =>
  queryOptions({ queryKey: jobsQueryKey, queryFn: ({ signal }) => getJobs(signal) })

export const useJobs = () => {
  const live = useClusterStreamLive()
  return useQuery({ ...jobsQueryOptions(), refetchInterval: live ? false : POLL_FALLBACK_MS })
}
