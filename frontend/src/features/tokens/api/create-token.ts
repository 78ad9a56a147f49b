import { useMutation, useQueryClient } from '@tanstack/react-query'
import { api } from '../../../lib/api'
import { tokensQueryKey, type ApiToken } from './get-tokens'

export interface TokenCreate {
  name: string
  /** Omitted: the token never expires. */
  expires_in_days?: number
}

/** The answer to a creation: the only time the token itself is ever shown. */
export type ApiTokenCreated = ApiToken & { token: string; username: string }

export const createToken = (input: TokenCreate) => api.post<ApiTokenCreated>('/api/auth/tokens', input)

export const useCreateToken = () => {
  const queryClient = useQueryClient()
  return useMutation({
    mutationFn: createToken,
    onSuccess: (created) => {
      // The token is shown once by the caller and never stored in the cache.
      const { token: _token, username: _username, ...listed } = created
      queryClient.setQueryData<ApiToken[]>(tokensQueryKey, (old) =>
        old ? [listed, ...old.filter((t) => t.id !== listed.id)] : old,
      )
    },
  })
}
