import { useMutation, useQueryClient } from '@tanstack/react-query'
import { api, dataOf } from '../../../lib/api'
import { queueQueryKey } from '../../../lib/queue-query-key'
import type { PriorityInput, Queue } from '../../../lib/types'
import { setJobDetail } from './cache'

export const updateJobPriority = ({ id, priority }: { id: number; priority: PriorityInput }) =>
  dataOf(api.PATCH('/api/jobs/{job_id}', { params: { path: { job_id: id } }, body: { priority } }))

/** PATCH /api/jobs/{id} {priority}: the job's caches take the answer; the queue is asked again. */
export const useUpdateJobPriority = () => {
  const queryClient = useQueryClient()
  return useMutation({
    mutationFn: updateJobPriority,
    onSuccess: (job) => {
      setJobDetail(queryClient, job)
      // A queued job moves at once: its new priority shows now, its new place with the queue asked again.
      queryClient.setQueryData<Queue>(queueQueryKey, (old) =>
        old ? { ...old, jobs: old.jobs.map((e) => (e.id === job.id ? { ...e, priority: job.priority } : e)) } : old,
      )
      void queryClient.invalidateQueries({ queryKey: queueQueryKey })
    },
  })
}
