import { useQuery } from '@tanstack/react-query'
import { api } from '../../../lib/api'
import type { Recipe } from '../../../lib/types'

/** The built-in recipes a job may run; they change only with a server upgrade. */
export const useRecipes = () =>
  useQuery({
    queryKey: ['recipes'] as const,
    queryFn: ({ signal }) => api.get<Recipe[]>('/api/recipes', signal),
    staleTime: Infinity,
  })
