import { useMutation, useQueryClient } from '@tanstack/react-query'
import { api, dataOf } from '../../../lib/api'
import type { components } from '../../../lib/api-schema'
import { meQueryOptions } from './get-me'

export type Credentials = components['schemas']['CredentialsIn']

export const login = (credentials: Credentials) => dataOf(api.POST('/api/auth/login', { body: credentials }))

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
