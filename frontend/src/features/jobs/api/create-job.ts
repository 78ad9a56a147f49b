import { useMutation, useQueryClient } from '@tanstack/react-query'
import { api } from '../../../lib/api'
import type { JobDetail, JobSpec } from '../../../lib/types'
import { setJobDetail } from './cache'

type DeepPartial<T> = { [K in keyof T]?: T[K] extends object ? (T[K] extends unknown[] ? T[K] : DeepPartial<T[K]>) : T[K] }

/** What the form sends: the server fills every omitted section with its defaults. */
export type JobSpecInput = Pick<JobSpec, 'name' | 'entrypoint'> & DeepPartial<Omit<JobSpec, 'name' | 'entrypoint'>>

export const createJob = (spec: JobSpecInput) => api.post<JobDetail>('/api/jobs', spec)

export const useCreateJob = () => {
  const queryClient = useQueryClient()
  return useMutation({
    mutationFn: createJob,
    onSuccess: (job) => setJobDetail(queryClient, job),
  })
}
