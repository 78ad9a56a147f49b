import { useMutation, useQueries, useQuery, useQueryClient } from '@tanstack/react-query'
import { api, dataOf } from '../../../lib/api'
import type { components } from '../../../lib/api-schema'

export type Sweep = components['schemas']['SweepOut']
export type SweepSummary = components['schemas']['SweepSummaryOut']
export type Trial = components['schemas']['TrialOut']

/** A sweep moves with its trials' jobs: asked again every few seconds while it runs. */
export const LIVE_MS = 2_000
const FINAL = new Set(['stopped', 'completed', 'failed'])
export const isFinal = (status: string) => FINAL.has(status)

export const useSweeps = () =>
  useQuery({
    queryKey: ['sweeps'] as const,
    queryFn: ({ signal }) => dataOf(api.GET('/api/sweeps', { signal })),
    refetchInterval: (query) => (query.state.data?.some((s) => !isFinal(s.status)) ? LIVE_MS : false),
  })

export const useSweep = (id: number) =>
  useQuery({
    queryKey: ['sweeps', id] as const,
    queryFn: ({ signal }) => dataOf(api.GET('/api/sweeps/{sweep_id}', { params: { path: { sweep_id: id } }, signal })),
    refetchInterval: (query) => (query.state.data && isFinal(query.state.data.status) ? false : LIVE_MS),
  })

/** Each trial's metric curve (the job's history, downsampled by the server: 200 points a trial). */
export const useTrialCurves = (trials: Trial[], metric: string, live: boolean) =>
  useQueries({
    queries: trials
      .filter((t) => t.job != null)
      .map((t) => ({
        queryKey: ['jobs', t.job, 'metrics', 'sweep'] as const,
        queryFn: ({ signal }: { signal: AbortSignal }) =>
          dataOf(api.GET('/api/jobs/{job_id}/metrics', { params: { path: { job_id: t.job! }, query: { points: 200 } }, signal })),
        refetchInterval: live && t.status === 'running' ? LIVE_MS * 2 : (false as const),
        select: (history: components['schemas']['JobMetricsOut']) => ({
          trial: t,
          points: history.series
            .filter((s) => s.name === metric)
            .flatMap((s) => s.buckets.map((b) => ({ x: b.last_step, y: b.mean }))),
        }),
      })),
  })

export const useSweepAction = (id: number) => {
  const queryClient = useQueryClient()
  return useMutation({
    mutationFn: (action: 'stop' | 'resume') =>
      dataOf(
        action === 'stop'
          ? api.POST('/api/sweeps/{sweep_id}/stop', { params: { path: { sweep_id: id } } })
          : api.POST('/api/sweeps/{sweep_id}/resume', { params: { path: { sweep_id: id } } }),
      ),
    onSuccess: (sweep) => {
      queryClient.setQueryData(['sweeps', id], sweep)
      void queryClient.invalidateQueries({ queryKey: ['sweeps'], exact: true })
    },
  })
}
