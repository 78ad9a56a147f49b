import type { ChartSeries, Point } from '../../components/chart-data'
import type { ChartMark } from '../../components/LineChart'
import type { JobMetrics, MetricEvent, StateEvent } from '../../lib/types'

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

/** The start of an elastic job's resized attempt, as the server words it (jobs/control/dispatch.py `resized`). */
const RESIZED = /^(shrunk|grown) from \d+ to (\d+) nodes?\b/

/**
 * Which attempts of an elastic job started at another size than the one before, and how: attempt ->
 * "shrunk to 2 nodes" / "grown to 3 nodes", from the job's "dispatching" state events (whose reason
 * starts "shrunk from 3 to 2 nodes: machine m3 lost; launching ..." or "grown from 2 to 3 nodes; ...").
 */
export function resizesByAttempt(states: StateEvent[]): Map<number, string> {
  const resizes = new Map<number, string>()
  for (const event of states) {
    if (event.scope !== 'job' || event.status !== 'dispatching' || typeof event.attempt !== 'number') continue
    const match = RESIZED.exec(event.reason ?? '')
    if (match) resizes.set(event.attempt, `${match[1]} to ${match[2]} ${match[2] === '1' ? 'node' : 'nodes'}`)
  }
  return resizes
}

/** A chart's lines (one per attempt) and its marks (where each resized attempt starts). */
export interface MetricChartData {
  series: ChartSeries[]
  marks: ChartMark[]
}

/**
 * One line per attempt for `name`: the server's downsampled history (bucket means) up to the first
 * step the stream holds for that attempt, then every streamed point of the primary rank. An attempt
 * in `resizes` is labelled "attempt 2 · shrunk to 2 nodes" and marked at its first step.
 */
export function metricChart(
  name: string,
  history: JobMetrics | undefined,
  live: MetricEvent[],
  resizes: ReadonlyMap<number, string> = new Map(),
): MetricChartData {
  const byAttempt = new Map<number, Point[]>()
  // Each attempt's first step: a history bucket's first, not its midpoint where its mean is drawn.
  const firstStep = new Map<number, number>()
  for (const m of live) {
    const y = m[name]
    if (typeof y !== 'number' || !Number.isFinite(y) || typeof m.step !== 'number') continue
    const attempt = m.attempt ?? 0
    let points = byAttempt.get(attempt)
    if (!points) byAttempt.set(attempt, (points = []))
    points.push({ x: m.step, y })
    firstStep.set(attempt, Math.min(firstStep.get(attempt) ?? Infinity, m.step))
  }
  for (const s of history?.series ?? []) {
    if (s.name !== name) continue
    const streamed = byAttempt.get(s.attempt) ?? []
    const from = firstStep.get(s.attempt) ?? Infinity
    const kept = s.buckets.filter((b) => b.last_step < from)
    if (!kept.length) continue
    byAttempt.set(s.attempt, [...kept.map((b) => ({ x: (b.first_step + b.last_step) / 2, y: b.mean })), ...streamed])
    firstStep.set(s.attempt, kept.reduce((first, b) => Math.min(first, b.first_step), from))
  }
  const attempts = [...byAttempt.keys()].sort((a, b) => a - b)
  const series = attempts.map((attempt) => {
    const resize = resizes.get(attempt)
    return {
      label: resize ? `attempt ${attempt} · ${resize}` : `attempt ${attempt}`,
      points: byAttempt.get(attempt)!.sort((p, q) => p.x - q.x),
    }
  })
  const marks = attempts.flatMap((attempt) => {
    const resize = resizes.get(attempt)
    const x = firstStep.get(attempt)
    return resize && x != null && Number.isFinite(x) ? [{ x, label: resize }] : []
  })
  return { series, marks }
}

/** The lines of metricChart alone. */
export function seriesFor(
  name: string,
  history: JobMetrics | undefined,
  live: MetricEvent[],
  resizes?: ReadonlyMap<number, string>,
): ChartSeries[] {
  return metricChart(name, history, live, resizes).series
}
