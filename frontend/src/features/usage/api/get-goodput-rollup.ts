import { keepPreviousData, queryOptions, useQuery } from '@tanstack/react-query'
import { api, dataOf } from '../../../lib/api'
import type { UsageGroup } from '../../../lib/types'
import type { UsageWindow } from './get-usage'

// Live jobs' splits grow by the second, the ended ones' never change: a minute is fresh enough.
const REFRESH_MS = 60_000

export const goodputRollupQueryKey = (by: UsageGroup, window: UsageWindow) => ['usage', 'goodput', by, window] as const

export const goodputRollupQueryOptions = (by: UsageGroup, window: UsageWindow) =>
  queryOptions({
    queryKey: goodputRollupQueryKey(by, window),
    queryFn: ({ signal }) => dataOf(api.GET('/api/usage/goodput', { params: { query: { by, since: window } }, signal })),
  })

/** GET /api/usage/goodput: goodput, GPU-hours and cost per project, user or machine; refreshed every minute. */
export const useGoodputRollup = (by: UsageGroup, window: UsageWindow) =>
  useQuery({ ...goodputRollupQueryOptions(by, window), refetchInterval: REFRESH_MS, placeholderData: keepPreviousData })
