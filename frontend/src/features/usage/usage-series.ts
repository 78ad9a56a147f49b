import type { ChartSeries } from '../../components/chart-data'
import type { Usage, UsageTotal } from '../../lib/types'

export interface UsageChart {
  key: string
  series: ChartSeries[]
}

/**
 * A chart per key, in the totals' order (most GPU-hours first): its GPU-hours and process-hours in
 * each bucket, x in Unix seconds (the bucket's start). The server sums them; this only lays them out.
 */
export function usageCharts(usage: Usage, limit = Infinity): UsageChart[] {
  const xs = (usage.buckets ?? []).map((iso) => Date.parse(iso) / 1000)
  return (usage.series ?? []).slice(0, limit).map((s) => ({
    key: s.key,
    series: [
      { label: 'GPU-hours', points: xs.map((x, i) => ({ x, y: s.gpu_hours[i] ?? 0 })) },
      { label: 'process-hours', points: xs.map((x, i) => ({ x, y: s.process_hours[i] ?? 0 })) },
    ],
  }))
}

/** Whether anything was used in the window at all. */
export const hasUsage = (totals: UsageTotal[]) => totals.some((t) => t.gpu_seconds > 0 || t.process_seconds > 0)

/** Hours as a table shows them: two decimals, fewer digits for large numbers, small ones kept visible. */
export function formatHours(hours: number): string {
  if (hours === 0) return '0'
  if (Math.abs(hours) < 1) return hours.toPrecision(2)
  if (Math.abs(hours) < 100) return hours.toFixed(2)
  if (Math.abs(hours) < 10_000) return hours.toFixed(1)
  return Math.round(hours).toLocaleString('en-US')
}
