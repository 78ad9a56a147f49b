import { useMutation, useQueryClient } from '@tanstack/react-query'
import { api } from '../../../lib/api'
import type { Machine } from '../../../lib/types'
import { machinesQueryKey } from './get-machines'

export const deleteMachine = (id: number) => api.delete(`/api/machines/${id}`)

export const useDeleteMachine = () => {
  const queryClient = useQueryClient()
  return useMutation({
    mutationFn: deleteMachine,
    onSuccess: (_data, id) => {
      queryClient.setQueryData<Machine[]>(machinesQueryKey, (old) => old?.filter((m) => m.id !== id))
    },
  })
}
