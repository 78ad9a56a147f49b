import { useMutation, useQueryClient } from '@tanstack/react-query'
import { api, dataOf } from '../../../lib/api'
import type { Machine, MachineCreate } from '../../../lib/types'
import { machinesQueryKey } from './get-machines'

export const createMachine = (input: MachineCreate) => dataOf(api.POST('/api/machines', { body: input }))

export const useCreateMachine = () => {
  const queryClient = useQueryClient()
  return useMutation({
    mutationFn: createMachine,
    onSuccess: (created) => {
      // The token (alone and in the agent's command line) is shown once by the caller and never
      // stored in the cache.
      const { token: _token, agent_command: _command, ...machine } = created
      queryClient.setQueryData<Machine[]>(machinesQueryKey, (old) =>
        old ? [...old.filter((m) => m.id !== machine.id), machine] : old,
      )
      void queryClient.invalidateQueries({ queryKey: machinesQueryKey })
    },
  })
}
