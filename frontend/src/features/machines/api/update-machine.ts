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

export const useSetMachineVolumes = () => {
  const queryClient = useQueryClient()
  return useMutation({
    mutationFn: setMachineVolumes,
    onSuccess: (updated) => {
      queryClient.setQueryData<Machine[]>(machinesQueryKey, (old) => old?.map((m) => (m.id === updated.id ? updated : m)))
    },
  })
}

/** End a quarantine (a hang's verdict put the machine there): the planner places nodes there again. */
export const releaseMachine = (id: number) =>
  dataOf(api.PATCH('/api/machines/{machine_id}', { params: { path: { machine_id: id } }, body: { quarantined: false } }))

export const useReleaseMachine = () => {
  const queryClient = useQueryClient()
  return useMutation({
    mutationFn: releaseMachine,
    onSuccess: (updated) => {
      queryClient.setQueryData<Machine[]>(machinesQueryKey, (old) => old?.map((m) => (m.id === updated.id ? updated : m)))
    },
  })
}

export const useSetMachineDrain = () => {
  const queryClient = useQueryClient()
  return useMutation({
    mutationFn: setMachineDrain,
    onSuccess: (updated) => {
      // At once, not on the cluster stream's next snapshot.
      queryClient.setQueryData<Machine[]>(machinesQueryKey, (old) => old?.map((m) => (m.id === updated.id ? updated : m)))
    },
  })
}
