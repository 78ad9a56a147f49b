import { useMutation, useQueryClient } from '@tanstack/react-query'
import { api } from '../../../lib/api'
import { tokensQueryKey, type ApiToken } from './get-tokens'

export const revokeToken = (id: number) => api.delete(`/api/auth/tokens/${id}`)

export const useRevokeToken = () => {
  const queryClient = useQueryClient()
  return useMutation({
    mutationFn: revokeToken,
    onSuccess: (_data, id) => {
      queryClient.setQueryData<ApiToken[]>(tokensQueryKey, (old) => old?.filter((t) => t.id !== id))
    },
  })
}
