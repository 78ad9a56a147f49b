import { api, dataOf } from '../../../lib/api'
import type { JobSpecInput } from '../../../lib/types'

export type { JobSpecInput }

export const createJob = (spec: JobSpecInput) => dataOf(api.POST('/api/jobs', { body: spec }))
