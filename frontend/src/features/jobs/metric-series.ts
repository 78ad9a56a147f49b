import type { ChartSeries, Point } from '../../components/chart-data'
import type { JobMetrics, MetricEvent } from '../../lib/types'

/** Payload keys of a metric event that are not series of their own. */
const NOT_SERIES = new Set(['id', 'job', 'node', 'node_rank', 'rank', 'seq', 'attempt', 'ts', 'type', 'step', 'total_steps', 'dropped'])
/** Charts in this order first, then the rest alphabetically. */
const FIRST = ['loss', 'throughput', 'lr']

/** Metrics from one rank: rank 0 (or job-wide ones) when present, else the lowest rank seen. */
export function primarySeries(metrics: MetricEvent[]): MetricEvent[] {
  if (metrics.length === 0) return metrics
  const main = metrics.filter((m) => m.rank === 0 || m.rank == null)
  if (main.length) return main
  const lowest = Math.min(...metrics.map((m) => m.rank ?? 0))
  return metrics.filter((m) => m.rank === lowest)
}

/** Chart order: loss, throughput, lr, then the rest alphabetically (an Array.sort comparator). */
export function byChartOrder(a: string, b: string): number {
  const rank = (n: string) => (FIRST.includes(n) ? FIRST.indexOf(n) : FIRST.length)
  return rank(a) - rank(b) || a.localeCompare(b)
}

/** Every metric name reported, in the history or on the stream, in chart order. */
export function metricNames(history: JobMetrics | undefined, live: MetricEvent[]): string[] {
  const names = new Set(history?.names ?? [])
  for (const m of live) {
    for (const [key, value] of Object.entries(m)) if (!NOT_SERIES.has(key) && typeof value === 'number') names.add(key)
  }
  return [...names].filter((n) => !NOT_SERIES.has(n)).sort(byChartOrder)
}

/**
 * One line per attempt for `name`: the server's downsampled history (bucket means) up to the first
 * step the stream holds for that attempt, then every streamed point of the primary rank.
 */
export function seriesFor(name: string, history: JobMetrics | undefined, live: MetricEvent[]): ChartSeries[] {
  const byAttempt = new Map<number, Point[]>()
  for (const m of live) {
    const y = m[name]
    if (typeof y !== 'number' || !Number.isFinite(y) || typeof m.step !== 'number') continue
    const attempt = m.attempt ?? 0
    let points = byAttempt.get(attempt)
    if (!points) byAttempt.set(attempt, (points = []))
    points.push({ x: m.step, y })
  }
  for (const s of history?.series ?? []) {
    if (s.name !== name) continue
    const streamed = byAttempt.get(s.attempt) ?? []
    const from = streamed.length ? streamed[0].x : Infinity
    const earlier = s.buckets.filter((b) => b.last_step < from).map((b) => ({ x: (b.first_step + b.last_step) / 2, y: b.mean }))
    if (earlier.length) byAttempt.set(s.attempt, [...earlier, ...streamed])
  }
  return [...byAttempt.entries()]
    .sort(([a], [b]) => a - b)
    .map(([attempt, points]) => ({ label: `attempt ${attempt}`, points: points.sort((p, q) => p.x - q.x) }))
}
