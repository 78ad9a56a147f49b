import { useMutation, useQueryClient } from '@tanstack/react-query'
import { api, dataOf } from '../../../lib/api'
import { tokensQueryKey, type ApiToken } from './get-tokens'

export const revokeToken = (id: number) =>
  dataOf(api.DELETE('/api/auth/tokens/{token_id}', { params: { path: { token_id: id } } }))

export const useRevokeToken = () => {
  const queryClient = useQueryClient()
  return useMutation({
    mutationFn: revokeToken,
    onSuccess: (_data, id) => {
      queryClient.setQueryData<ApiToken[]>(tokensQueryKey, (old) => old?.filter((t) => t.id !== id))
    },
  })
}
