import { useMutation, useQueryClient } from '@tanstack/react-query'
import { api, dataOf } from '../../../lib/api'
import type { JobSpecInput } from '../../../lib/types'
import { setJobDetail } from './cache'

export type { JobSpecInput }

export const createJob = (spec: JobSpecInput) => dataOf(api.POST('/api/jobs', { body: spec }))

export const useCreateJob = () => {
  const queryClient = useQueryClient()
  return useMutation({
    mutationFn: createJob,
    onSuccess: (job) => setJobDetail(queryClient, job),
  })
}
