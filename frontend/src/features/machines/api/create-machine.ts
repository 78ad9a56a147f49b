import { useMutation, useQueryClient } from '@tanstack/react-query'
import { api } from '../../../lib/api'
import type { Machine, MachineCreate, MachineCreated } from '../../../lib/types'
import { machinesQueryKey } from './get-machines'

export const createMachine = (input: MachineCreate) => api.post<MachineCreated>('/api/machines', input)

export const useCreateMachine = () => {
  const queryClient = useQueryClient()
  return useMutation({
    mutationFn: createMachine,
    onSuccess: (created) => {
      // The token is shown once by the caller and never stored in the cache.
      const { token: _token, ...machine } = created
      queryClient.setQueryData<Machine[]>(machinesQueryKey, (old) =>
        old ? [...old.filter((m) => m.id !== machine.id), machine] : old,
      )
      void queryClient.invalidateQueries({ queryKey: machinesQueryKey })
    },
  })
}

/** What to run on the new machine; the token is only ever shown this once. */
export function agentCommand(origin: string, token: string): string {
  return `torchyard agent --server ${origin} --token ${token}`
}
