import { keepPreviousData, queryOptions, useQuery } from '@tanstack/react-query'
import { api, dataOf } from '../../../lib/api'
import type { UsageGroup } from '../../../lib/types'

/** The windows the page offers, as `since` ages, and the bucket each is charted by. */
export const USAGE_WINDOWS = {
  '24h': { label: 'Last 24 hours', bucket: 'hour', span: 'the last 24 hours' },
  '7d': { label: 'Last 7 days', bucket: 'day', span: 'the last 7 days' },
  '30d': { label: 'Last 30 days', bucket: 'day', span: 'the last 30 days' },
} as const
export type UsageWindow = keyof typeof USAGE_WINDOWS

export const USAGE_GROUPS: readonly UsageGroup[] = ['project', 'user', 'machine']

// Running jobs add to it by the second; a minute is fresh enough for hours.
const REFRESH_MS = 60_000

export const usageQueryKey = (by: UsageGroup, window: UsageWindow) => ['usage', by, window] as const

export const getUsage = (by: UsageGroup, window: UsageWindow, signal?: AbortSignal) =>
  dataOf(api.GET('/api/usage', { params: { query: { by, since: window, bucket: USAGE_WINDOWS[window].bucket } }, signal }))

export const usageQueryOptions = (by: UsageGroup, window: UsageWindow) =>
  queryOptions({ queryKey: usageQueryKey(by, window), queryFn: ({ signal }) => getUsage(by, window, signal) })

/** GET /api/usage for a grouping and window, with a series per key; refreshed every minute. */
export const useUsage = (by: UsageGroup, window: UsageWindow) =>
  useQuery({ ...usageQueryOptions(by, window), refetchInterval: REFRESH_MS, placeholderData: keepPreviousData })
