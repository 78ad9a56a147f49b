import { queryOptions, useQuery } from '@tanstack/react-query'
import { api, dataOf } from '../../../lib/api'
import type { components } from '../../../lib/api-schema'

/** One of the signed-in user's API tokens, as listed: never the token itself. */
export type ApiToken = components['schemas']['ApiTokenOut']

export const tokensQueryKey = ['auth', 'tokens'] as const

export const getTokens = (signal?: AbortSignal) => dataOf(api.GET('/api/auth/tokens', { signal }))

export const tokensQueryOptions = () =>
  queryOptions({ queryKey: tokensQueryKey, queryFn: ({ signal }) => getTokens(signal) })

export const useTokens = () => useQuery(tokensQueryOptions())
