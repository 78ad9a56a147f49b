import { queryOptions, useQuery } from '@tanstack/react-query'
import { api, dataOf } from '../../../lib/api'
import type { components } from '../../../lib/api-schema'

/** One run (an attempt of a job) as listed, with each metric's final and best value. */
export type Run = components['schemas']['RunRowOut']

/** The newest runs the list shows: every metric of each is summed up server-side, one scan for all. */
export const RUNS_LISTED = 100

export const runsQueryKey = ['experiments', 'runs'] as const

export const getRuns = (signal?: AbortSignal) =>
  dataOf(api.GET('/api/experiments', { params: { query: { limit: RUNS_LISTED } }, signal }))

export const runsQueryOptions = () =>
  queryOptions({ queryKey: runsQueryKey, queryFn: ({ signal }) => getRuns(signal), staleTime: 10_000 })

export const useRuns = () => useQuery(runsQueryOptions())
