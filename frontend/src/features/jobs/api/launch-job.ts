import { useMutation, useQueryClient } from '@tanstack/react-query'
import { api, dataOf } from '../../../lib/api'
import type { JobDetail, JobSpecInput } from '../../../lib/types'
import { setJobDetail } from './cache'
import { createJob } from './create-job'
import { getJob } from './get-job'

/** What Launch submits: the planned spec, and the one machine it goes to when one was picked. */
export interface Launch {
  spec: JobSpecInput
  /** TransformerLab's remote job dispatch: the whole job on this machine. Null: where the planner chooses. */
  machineId: number | null
}

/**
 * POST /api/network/machines/{id}/dispatch_job (TransformerLab's "run an entire job on a single remote
 * machine"), then the job it became, as POST /api/jobs would have answered it.
 */
export async function dispatchJobToMachine(spec: JobSpecInput, machineId: number): Promise<JobDetail> {
  const dispatched = await dataOf(
    api.POST('/api/network/machines/{machine_id}/dispatch_job', { params: { path: { machine_id: machineId } }, body: spec }),
  )
  if (dispatched.job_id === null) throw new Error('the server dispatched the job but did not say which it is.')
  return getJob(dispatched.job_id)
}

export const launchJob = ({ spec, machineId }: Launch) =>
  machineId === null ? createJob(spec) : dispatchJobToMachine(spec, machineId)

export const useLaunchJob = () => {
  const queryClient = useQueryClient()
  return useMutation({
    mutationFn: launchJob,
    onSuccess: (job) => setJobDetail(queryClient, job),
  })
}
