import { QueryCache, QueryClient } from '@tanstack/react-query'
import { isApiError } from '../lib/api'
import { meQueryKey } from '../features/auth/api/get-me'

/**
 * One client for the app. A 401/403 on any query may mean the session expired: re-check
 * /api/auth/me, and the auth guard redirects to /login if that fails too (a 403 alone can also
 * be a plain permission refusal).
 */
export function createQueryClient(): QueryClient {
  const client: QueryClient = new QueryClient({
    queryCache: new QueryCache({
      onError: (error, query) => {
        if (isApiError(error) && error.isAuthError && query.queryKey[0] !== meQueryKey[0]) {
          void client.invalidateQueries({ queryKey: meQueryKey })
        }
      },
    }),
    defaultOptions: {
      queries: {
        staleTime: 2_000,
        retry: (failureCount, error) => {
          if (isApiError(error) && error.status < 500) return false
          return failureCount < 2
        },
      },
      mutations: { retry: false },
    },
  })
  return client
}
