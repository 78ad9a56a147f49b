import { useMutation, useQueryClient } from '@tanstack/react-query'
import { api, dataOf } from '../../../lib/api'

export const logout = () => dataOf(api.POST('/api/auth/logout'))

export const useLogout = () => {
  const queryClient = useQueryClient()
  return useMutation({
    mutationFn: logout,
    onSettled: () => queryClient.clear(),
  })
}
