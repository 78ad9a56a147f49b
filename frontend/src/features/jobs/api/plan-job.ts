import { useMutation } from '@tanstack/react-query'
import { api, dataOf } from '../../../lib/api'
import type { JobSpecInput } from '../../../lib/types'

/** The dry run: where every rank would go now, with the adjusted hyperparameters. Launches nothing. */
export const planJob = (spec: JobSpecInput) => dataOf(api.POST('/api/jobs/plan', { body: spec }))

export const usePlanJob = () => useMutation({ mutationFn: planJob })
