import { useMutation, useQueryClient } from '@tanstack/react-query'
import { api, dataOf } from '../../../lib/api'
import { setJobDetail } from './cache'

export const stopJob = (id: number) => dataOf(api.POST('/api/jobs/{job_id}/stop', { params: { path: { job_id: id } } }))

export const useStopJob = () => {
  const queryClient = useQueryClient()
  return useMutation({
    mutationFn: stopJob,
    onSuccess: (job) => setJobDetail(queryClient, job),
  })
}
