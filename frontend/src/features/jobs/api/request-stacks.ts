import { useMutation } from '@tanstack/react-query'
import { api, dataOf } from '../../../lib/api'

/** Ask every running node for its ranks' Python stacks: the answers come as `stacks` events on the job's stream. */
export const requestStacks = (id: number) =>
  dataOf(api.POST('/api/jobs/{job_id}/stacks', { params: { path: { job_id: id } } }))

export const useRequestStacks = () => useMutation({ mutationFn: requestStacks })
