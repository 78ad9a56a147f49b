import { useMutation, useQueryClient } from '@tanstack/react-query'
import { api, dataOf } from '../../../lib/api'
import type { components } from '../../../lib/api-schema'
import { tokensQueryKey, type ApiToken } from './get-tokens'

/** `expires_in_days` omitted: the token never expires. */
export type TokenCreate = components['schemas']['TokenSpecIn']

/** The answer to a creation: the only time the token itself is ever shown. */
export type ApiTokenCreated = components['schemas']['ApiTokenCreatedOut']

export const createToken = (input: TokenCreate) => dataOf(api.POST('/api/auth/tokens', { body: input }))

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
