import { useMutation, useQueryClient } from '@tanstack/react-query'
import { api } from '../../../lib/api'

export const logout = () => api.post<void>('/api/auth/logout')

export const useLogout = () => {
  const queryClient = useQueryClient()
  return useMutation({
    mutationFn: logout,
    onSettled: () => queryClient.clear(),
  })
}
