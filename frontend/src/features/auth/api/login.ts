import { useMutation, useQueryClient } from '@tanstack/react-query'
import { api } from '../../../lib/api'
import { meQueryOptions } from './get-me'

export interface Credentials {
  username: string
  password: string
}

export const login = (credentials: Credentials) =>
  api.post<{ username: string }>('/api/auth/login', credentials)

export const useLogin = () => {
  const queryClient = useQueryClient()
  return useMutation({
    mutationFn: login,
    onSuccess: async () => {
      // Whatever was cached belonged to the previous session (or none): start clean.
      queryClient.removeQueries()
      await queryClient.prefetchQuery(meQueryOptions())
    },
  })
}
