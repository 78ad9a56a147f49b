import { useQuery } from '@tanstack/react-query'
import { api, dataOf } from '../../../lib/api'

/** A job's committed checkpoints; `seen` (checkpoint events streamed so far) refetches on each new one. */
export const useCheckpoints = (jobId: number, seen: number) =>
  useQuery({
    queryKey: ['jobs', jobId, 'checkpoints', seen] as const,
    queryFn: ({ signal }) =>
      dataOf(api.GET('/api/jobs/{job_id}/checkpoints', { params: { path: { job_id: jobId } }, signal })),
    placeholderData: (previous) => previous,
  })

export const checkpointFileUrl = (jobId: number, checkpointId: number, path: string) =>
  `/api/jobs/${jobId}/checkpoints/${checkpointId}/files/${path.split('/').map(encodeURIComponent).join('/')}`
