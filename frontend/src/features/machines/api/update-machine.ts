import { useMutation, useQueryClient } from '@tanstack/react-query'
import { api, dataOf } from '../../../lib/api'
import type { Machine } from '../../../lib/types'
import { machinesQueryKey } from './get-machines'

/** "draining": no new nodes are placed there (its running nodes go on); "online" undoes it. */
export type DrainChange = { id: number; status: 'draining' | 'online' }

export const setMachineDrain = ({ id, status }: DrainChange) =>
  dataOf(api.PATCH('/api/machines/{machine_id}', { params: { path: { machine_id: id } }, body: { status } }))

/** The volumes declared on the server (name: absolute path), replacing the ones declared before. */
export type VolumesChange = { id: number; volumes: Record<string, string> }

export const setMachineVolumes = ({ id, volumes }: VolumesChange) =>
  dataOf(api.PATCH('/api/machines/{machine_id}', { params: { path: { machine_id: id } }, body: { volumes } }))

/** End a quarantine (a hang's verdict put the machine there): the planner places nodes there again. */
export const releaseMachine = (id: number) =>
  dataOf(api.PATCH('/api/machines/{machine_id}', { params: { path: { machine_id: id } }, body: { quarantined: false } }))

/** A change to one machine, shown at once in the list, not on the cluster stream's next snapshot. */
function useMachineChange<T>(mutationFn: (change: T) => Promise<Machine>) {
  const queryClient = useQueryClient()
  return useMutation({
    mutationFn,
    onSuccess: (updated) => {
      queryClient.setQueryData<Machine[]>(machinesQueryKey, (old) => old?.map((m) => (m.id === updated.id ? updated : m)))
    },
  })
}

export const useSetMachineVolumes = () => useMachineChange(setMachineVolumes)
export const useReleaseMachine = () => useMachineChange(releaseMachine)
export const useSetMachineDrain = () => useMachineChange(setMachineDrain)
