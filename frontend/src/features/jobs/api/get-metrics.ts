import { useQuery } from '@tanstack/react-query'
import { api } from '../../../lib/api'
import type { JobMetrics } from '../../../lib/types'

/** Buckets per series asked of the server: about one per pixel of a chart on a laptop screen. */
export const HISTORY_POINTS = 600

/**
 * Every metric's history over all attempts, downsampled by the server. Fetched once per page: the
 * live stream adds the points that follow.
 */
export const useMetricHistory = (jobId: number) =>
  useQuery({
    queryKey: ['jobs', jobId, 'metrics'] as const,
    queryFn: ({ signal }) => api.get<JobMetrics>(`/api/jobs/${jobId}/metrics?points=${HISTORY_POINTS}`, signal),
    staleTime: Infinity,
  })
