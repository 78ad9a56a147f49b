import { keepPreviousData, useQuery } from '@tanstack/react-query'
import { api, dataOf } from '../../../lib/api'
import type { components } from '../../../lib/api-schema'

export type Comparison = components['schemas']['CompareOut']

/** Buckets per series on the runs' shared step grid: about one per pixel of a chart on a laptop screen. */
export const COMPARE_POINTS = 400

export const compareRuns = (runs: string[], signal?: AbortSignal) =>
  dataOf(api.POST('/api/experiments/compare', { body: { runs, points: COMPARE_POINTS }, signal }))

/**
 * The runs side by side (POST, but it only reads: a query, cached per list of runs). The last
 * comparison stays on screen while the next loads, so the page does not jump.
 */
export const useComparison = (runs: string[]) =>
  useQuery({
    queryKey: ['experiments', 'compare', runs] as const,
    queryFn: ({ signal }) => compareRuns(runs, signal),
    enabled: runs.length > 0,
    placeholderData: keepPreviousData,
    staleTime: 30_000,
  })
