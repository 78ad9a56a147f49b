import { useMutation } from '@tanstack/react-query'
import { api } from '../../../lib/api'
import type { ExecutionPlan } from '../../../lib/types'
import type { JobSpecInput } from './create-job'

/** The dry run: where every rank would go now, with the adjusted hyperparameters. Launches nothing. */
export const planJob = (spec: JobSpecInput) => api.post<ExecutionPlan>('/api/jobs/plan', spec)

export const usePlanJob = () => useMutation({ mutationFn: planJob })
