import { useQuery } from '@tanstack/react-query'
import { api, dataOf } from '../../../lib/api'
import type { components } from '../../../lib/api-schema'

/**
 * One entry of GET /api/plugins. A built-in recipe is a plugin too (`builtin`, no bundle); an
 * uploaded plugin runs its `entrypoint` from its content-addressed `bundle` through the plugin harness.
 */
export type Plugin = components['schemas']['PluginOut']

/** Every plugin a job may run: the built-in recipes, then the registered plugins of the user's projects. */
export const getPlugins = (signal?: AbortSignal): Promise<Plugin[]> => dataOf(api.GET('/api/plugins', { signal }))

export const pluginsQueryKey = ['plugins'] as const

export const usePlugins = () => useQuery({ queryKey: pluginsQueryKey, queryFn: ({ signal }) => getPlugins(signal) })
