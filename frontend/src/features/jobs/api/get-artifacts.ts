import { useQuery } from '@tanstack/react-query'
import { api, dataOf } from '../../../lib/api'
import type { JobStatus } from '../../../lib/types'

/** A job's collected outputs. Nodes add them as they end, so the job's status is part of the key:
 * each transition (a node finishing, the job completing) fetches the list again. */
export const useArtifacts = (jobId: number, status: JobStatus) =>
  useQuery({
    queryKey: ['jobs', jobId, 'artifacts', status] as const,
    queryFn: ({ signal }) => dataOf(api.GET('/api/jobs/{job_id}/artifacts', { params: { path: { job_id: jobId } }, signal })),
  })
