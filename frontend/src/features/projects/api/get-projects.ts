import { queryOptions, useQuery } from '@tanstack/react-query'
import { api, dataOf } from '../../../lib/api'

export const projectsQueryKey = ['projects', 'list'] as const

export const getProjects = (signal?: AbortSignal) => dataOf(api.GET('/api/projects', { signal }))

export const projectsQueryOptions = () =>
  queryOptions({ queryKey: projectsQueryKey, queryFn: ({ signal }) => getProjects(signal) })

/**
 * The projects you belong to (staff: all), with your role, ceiling, quotas and what they hold now;
 * `refreshMs` for a page that shows what they hold (it changes as jobs start and end).
 */
export const useProjects = ({ refreshMs }: { refreshMs?: number } = {}) =>
  useQuery({ ...projectsQueryOptions(), refetchInterval: refreshMs ?? false })
