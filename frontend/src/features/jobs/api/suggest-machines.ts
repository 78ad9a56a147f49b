import { useQuery } from '@tanstack/react-query'
import { api, dataOf } from '../../../lib/api'

/** Online machines with `gpus` free GPUs each, in the order the planner would use them. */
export const useSuggestMachines = (machines: number, gpus: number, enabled: boolean) =>
  useQuery({
    queryKey: ['suggest-machines', machines, gpus] as const,
    queryFn: ({ signal }) =>
      dataOf(
        api.GET('/api/tasks/distributed/suggest_machines', {
          params: { query: { num_machines: machines, gpus_per_machine: gpus } },
          signal,
        }),
      ),
    enabled,
    staleTime: 0,
  })
