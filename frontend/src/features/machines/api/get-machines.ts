import { queryOptions, useQuery } from '@tanstack/react-query'
import { api, dataOf } from '../../../lib/api'
import { POLL_FALLBACK_MS, useClusterStreamLive } from '../../../lib/cluster-stream-status'

export const machinesQueryKey = ['machines'] as const

export const getMachines = (signal?: AbortSignal) => dataOf(api.GET('/api/machines', { signal }))

export const machinesQueryOptions = () =>
  queryOptions({ queryKey: machinesQueryKey, queryFn: ({ signal }) => getMachines(signal) })

export const useMachines = () => {
  const live = useClusterStreamLive()
  return useQuery({ ...machinesQueryOptions(), refetchInterval: live ? false : POLL_FALLBACK_MS })
}
