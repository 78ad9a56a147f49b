import { useMutation } from '@tanstack/react-query'
import { api, dataOf } from '../../../lib/api'
import type { components } from '../../../lib/api-schema'

/** Every machine pinged at once: each one's round trip, and how many answered. */
export type HealthCheck = components['schemas']['HealthCheckOut']
export type HealthCheckResult = components['schemas']['HealthCheckResultOut']

export const healthCheckAll = () => dataOf(api.POST('/api/network/health-check'))

export const useHealthCheckAll = () => useMutation({ mutationFn: healthCheckAll })
