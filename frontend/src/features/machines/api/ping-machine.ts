import { useMutation } from '@tanstack/react-query'
import { api, dataOf } from '../../../lib/api'
import type { components } from '../../../lib/api-schema'

/** Whether its agent answered over the broker, and the round trip (null: no answer within timeout_s). */
export type PingResult = components['schemas']['PingOut']

export const pingMachine = (id: number) =>
  dataOf(api.POST('/api/network/machines/{machine_id}/ping', { params: { path: { machine_id: id } } }))

export const usePingMachine = () => useMutation({ mutationFn: pingMachine })
