import { useQuery } from '@tanstack/react-query'
import { api, dataOf } from '../../../lib/api'

/** Buckets per series asked of the server: about one per pixel of a chart on a laptop screen. */
export const HISTORY_POINTS = 600

/**
 * Every metric's history over all attempts, downsampled by the server. Fetched once per page: the
 * live stream adds the points that follow.
 */
export const useMetricHistory = (jobId: number) =>
  useQuery({
    queryKey: ['jobs', jobId, 'metrics'] as const,
    queryFn: ({ signal }) =>
      dataOf(
        api.GET('/api/jobs/{job_id}/metrics', {
          params: { path: { job_id: jobId }, query: { points: HISTORY_POINTS } },
          signal,
        }),
      ),
    staleTime: Infinity,
  })
