import { queryOptions, useMutation, useQuery, useQueryClient } from '@tanstack/react-query'
import { api, dataOf } from '../../../lib/api'
import type { components } from '../../../lib/api-schema'
import { machinesQueryOptions } from '../../machines/api/get-machines'
import { preferencesOf, preferredNamesOf, type NewJobFormState } from '../new-job-spec'

/** TransformerLab's DistributedPreferences as the server keeps them for the signed-in user. */
export type DistributedPreferences = components['schemas']['DistributedPreferencesOut']
export type DistributedPreferencesInput = components['schemas']['DistributedPreferencesIn']

export const distributedPreferencesQueryKey = ['preferences', 'distributed'] as const

export const getDistributedPreferences = (signal?: AbortSignal) =>
  dataOf(api.GET('/api/preferences/distributed', { signal }))

export const saveDistributedPreferences = (input: DistributedPreferencesInput) =>
  dataOf(api.PUT('/api/preferences/distributed', { body: input }))

export const distributedPreferencesQueryOptions = () =>
  queryOptions({
    queryKey: distributedPreferencesQueryKey,
    queryFn: ({ signal }) => getDistributedPreferences(signal),
    // Only this user changes them, and a save puts what the server kept in the cache.
    staleTime: Infinity,
  })

export const useDistributedPreferences = () => useQuery(distributedPreferencesQueryOptions())

/**
 * "Save as my defaults": the New job form's distributed settings, its picked machines by id (the
 * machine list is cached already where the picker showed it; fetched once otherwise).
 */
export const useSaveDistributedPreferences = () => {
  const queryClient = useQueryClient()
  return useMutation({
    mutationFn: async (form: NewJobFormState) => {
      const machines = preferredNamesOf(form).length ? await queryClient.ensureQueryData(machinesQueryOptions()) : []
      return saveDistributedPreferences(preferencesOf(form, machines))
    },
    onSuccess: (saved) => queryClient.setQueryData(distributedPreferencesQueryKey, saved),
  })
}
