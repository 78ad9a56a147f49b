import { useMutation, useQueryClient } from '@tanstack/react-query'
import { api, dataOf } from '../../../lib/api'
import type { Machine } from '../../../lib/types'
import { machinesQueryKey } from './get-machines'

/**
 * Without `force` the server refuses (409) while nodes of live jobs run there; with it, those
 * nodes are declared lost first, which stops them and recovers their jobs elsewhere.
 */
export type MachineRemoval = { id: number; force?: boolean }

export const deleteMachine = ({ id, force = false }: MachineRemoval) =>
  dataOf(
    api.DELETE('/api/machines/{machine_id}', {
      params: { path: { machine_id: id }, query: force ? { force: true } : undefined },
    }),
  )

export const useDeleteMachine = () => {
  const queryClient = useQueryClient()
  return useMutation({
    mutationFn: deleteMachine,
    onSuccess: (_data, { id }) => {
      queryClient.setQueryData<Machine[]>(machinesQueryKey, (old) => old?.filter((m) => m.id !== id))
    },
  })
}
