import { queryOptions, useQuery } from '@tanstack/react-query'
import { api } from '../../../lib/api'
import type { ISODateTime } from '../../../lib/types'

/** One of the signed-in user's API tokens, as listed: never the token itself. */
export interface ApiToken {
  id: number
  name: string
  /** The token's first characters, to tell tokens apart. */
  prefix: string
  created: ISODateTime
  /** null: never expires. */
  expiry: ISODateTime | null
  last_used: ISODateTime | null
}

export const tokensQueryKey = ['auth', 'tokens'] as const

export const getTokens = (signal?: AbortSignal) => api.get<ApiToken[]>('/api/auth/tokens', signal)

export const tokensQueryOptions = () =>
  queryOptions({ queryKey: tokensQueryKey, queryFn: ({ signal }) => getTokens(signal) })

export const useTokens = () => useQuery(tokensQueryOptions())
