import { useQuery } from '@tanstack/react-query'
import { api, dataOf } from '../../../lib/api'

/** The built-in recipes a job may run; they change only with a server upgrade. */
export const useRecipes = () =>
  useQuery({
    queryKey: ['recipes'] as const,
    queryFn: ({ signal }) => dataOf(api.GET('/api/recipes', { signal })),
    staleTime: Infinity,
  })
