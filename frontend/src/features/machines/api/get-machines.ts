import { queryOptions, useQuery } from '@tanstack/react-query'
import { api } from '../../../lib/api'
import { POLL_FALLBACK_MS, useClusterStreamLive } from '../../../lib/cluster-stream-status'
import type { Machine } from '../../../lib/types'

export const machinesQueryKey = ['machines'] as const

export const getMachines = (signal?: AbortSignal) => api.get<Machine[]>('/api/machines', signal)

export const machinesQueryOptions = () =>
  queryOptions({ queryKey: machinesQueryKey, queryFn: ({ signal }) => getMachines(signal) })

export const useMachines = () => {
  const live = useClusterStreamLive()
  return useQuery({ ...machinesQueryOptions(), refetchInterval: live ? false : POLL_FALLBACK_MS })
}
