import { queryOptions, useQuery, type QueryClient } from '@tanstack/react-query'
import { api, dataOf } from '../../../lib/api'

export const meQueryKey = ['auth', 'me'] as const

export const getMe = (signal?: AbortSignal) => dataOf(api.GET('/api/auth/me', { signal }))

export const meQueryOptions = () =>
  queryOptions({
    queryKey: meQueryKey,
    queryFn: ({ signal }) => getMe(signal),
    staleTime: 5 * 60_000,
    retry: false,
  })

export const useMe = () => useQuery(meQueryOptions())

/**
 * For a stream's `onRefused`: 4401 means the session is gone, and re-checking it sends the user
 * to the login page.
 */
export const recheckSessionOnRefusal = (queryClient: QueryClient) => (code: number) => {
  if (code === 4401) void queryClient.invalidateQueries({ queryKey: meQueryKey })
}
