import { useQuery } from '@tanstack/react-query'
import { api } from '../../../lib/api'
import type { Checkpoint } from '../../../lib/types'

/** A job's committed checkpoints; `seen` (checkpoint events streamed so far) refetches on each new one. */
export const useCheckpoints = (jobId: number, seen: number) =>
  useQuery({
    queryKey: ['jobs', jobId, 'checkpoints', seen] as const,
    queryFn: ({ signal }) => api.get<Checkpoint[]>(`/api/jobs/${jobId}/checkpoints`, signal),
    placeholderData: (previous) => previous,
  })

export const checkpointFileUrl = (jobId: number, checkpointId: number, path: string) =>
  `/api/jobs/${jobId}/checkpoints/${checkpointId}/files/${path.split('/').map(encodeURIComponent).join('/')}`
