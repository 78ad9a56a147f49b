import { useMutation, useQueryClient } from '@tanstack/react-query'
import { api } from '../../../lib/api'
import type { JobDetail } from '../../../lib/types'
import { setJobDetail } from './cache'

export const stopJob = (id: number) => api.post<JobDetail>(`/api/jobs/${id}/stop`)

export const useStopJob = () => {
  const queryClient = useQueryClient()
  return useMutation({
    mutationFn: stopJob,
    onSuccess: (job) => setJobDetail(queryClient, job),
  })
}
