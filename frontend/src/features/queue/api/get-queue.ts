import { queryOptions, useQuery } from '@tanstack/react-query'
import { api, dataOf } from '../../../lib/api'
import { POLL_FALLBACK_MS, useClusterStreamLive } from '../../../lib/cluster-stream-status'
import { queueQueryKey } from '../../../lib/queue-query-key'

export const getQueue = (signal?: AbortSignal) => dataOf(api.GET('/api/queue', { signal }))

export const queueQueryOptions = () =>
  queryOptions({ queryKey: queueQueryKey, queryFn: ({ signal }) => getQueue(signal) })

/**
 * The queue, first in line first. Kept current by the cluster stream (queue-cache.ts: the server's
 * `queue` messages after each pass, and a refetch when a job enters or leaves it); polled only
 * while the stream is down.
 */
export const useQueue = () => {
  const live = useClusterStreamLive()
  return useQuery({ ...queueQueryOptions(), refetchInterval: live ? false : POLL_FALLBACK_MS })
}
