import { useQuery } from '@tanstack/react-query'
import { api, dataOf } from '../../../lib/api'

// A live job's split grows by the second; half a minute is fresh enough for a bar.
const LIVE_REFRESH_MS = 30_000

/**
 * GET /api/jobs/{id}/goodput: where the job's wall time went, overall and per attempt. `seen` (the
 * job's state events streamed so far) refetches on each transition, which is when a split changes
 * its course; a live job's is refreshed meanwhile.
 */
export const useJobGoodput = (jobId: number, seen: number) =>
  useQuery({
    queryKey: ['jobs', jobId, 'goodput', seen] as const,
    queryFn: ({ signal }) => dataOf(api.GET('/api/jobs/{job_id}/goodput', { params: { path: { job_id: jobId } }, signal })),
    placeholderData: (previous) => previous,
    refetchInterval: (query) => (query.state.data?.live ? LIVE_REFRESH_MS : false),
  })
