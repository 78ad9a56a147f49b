import type { ChartSeries } from '../../components/chart-data'
import type { components } from '../../lib/api-schema'
import { metricFormatter } from '../../lib/format'
import { byChartOrder } from '../jobs/metric-series'
import type { Comparison } from './api/compare-runs'
import type { Run } from './api/get-runs'

type RunOut = components['schemas']['RunOut']
type Goal = components['schemas']['GoalEnum']

/** `<job id>.<attempt>`, as the API names a run. */
const RUN_ID = /^\d{1,18}\.\d{1,9}$/
/** What one comparison takes (CompareIn.runs). */
export const MAX_COMPARED = 20

/** `?runs=7.1,9.0` to ['7.1', '9.0']: well-formed ids only, each once, in the order given, at most 20. */
export function parseRunIds(param: string | null): string[] {
  const ids = (param ?? '').split(',').map((id) => id.trim()).filter((id) => RUN_ID.test(id))
  return [...new Set(ids)].slice(0, MAX_COMPARED)
}

/** Ticks a run in or out of the selection, keeping the order they were picked in. */
export function toggleRun(selected: string[], runId: string): string[] {
  if (selected.includes(runId)) return selected.filter((id) => id !== runId)
  return selected.length >= MAX_COMPARED ? selected : [...selected, runId]
}

/** How a run is named in legends and column heads: its job's name and its id. */
export const runLabel = (run: RunOut) => `${run.name} · ${run.run_id}`

// --- the runs list ---------------------------------------------------------------------------

/** Every metric any listed run reported, in chart order (loss first). */
export function listedMetricNames(runs: Run[]): string[] {
  return [...new Set(runs.flatMap((run) => run.final_metrics.map((m) => m.name)))].sort(byChartOrder)
}

export const finalMetric = (run: Run, name: string) => run.final_metrics.find((m) => m.name === name)

/** The hyperparameters in one line, `lr=0.1 batch_size=64`, nested ones dotted. */
export function hyperparameterSummary(values: Record<string, unknown>, prefix = ''): string {
  return Object.entries(values)
    .map(([key, value]) =>
      value !== null && typeof value === 'object' && !Array.isArray(value) && Object.keys(value).length
        ? hyperparameterSummary(value as Record<string, unknown>, `${prefix}${key}.`)
        : `${prefix}${key}=${formatCell(value)}`,
    )
    .join(' ')
}

// --- the comparison --------------------------------------------------------------------------

export interface CompareChart {
  name: string
  /** One line per compared run, in the runs' order (so line i has colour i in every chart). */
  series: ChartSeries[]
}

/**
 * One chart per metric, a line per run: each bucket of the shared step grid drawn at the middle of
 * the steps it saw, at its mean. A run that never reported the metric keeps an empty line, so the
 * colours match the runs in every chart and in the table.
 */
export function compareCharts(comparison: Comparison): CompareChart[] {
  const labels = comparison.runs.map(runLabel)
  return [...comparison.series]
    .sort((a, b) => byChartOrder(a.name, b.name))
    .map((s) => ({
      name: s.name,
      series: labels.map((label, i) => ({
        label,
        points: (s.runs[i] ?? []).map((b) => ({ x: (b.first_step + b.last_step) / 2, y: b.mean })),
      })),
    }))
}

/** A value as one table cell: numbers as given, nothing as a dash, anything else as JSON. */
export function formatCell(value: unknown): string {
  if (value === null || value === undefined || value === '') return '—'
  if (typeof value === 'string') return value
  if (typeof value === 'number' || typeof value === 'boolean') return String(value)
  return JSON.stringify(value)
}

export interface SideBySideRow {
  key: string
  /** What the row holds: a hyperparameter (world size and arguments among them) or a metric's value. */
  group: 'hyperparameters' | 'final' | 'best'
  name: string
  /** Which way is better, for a metric row. */
  goal: Goal | null
  cells: string[]
  /** Not every run has the same value here. */
  differs: boolean
  /** The runs (by index) with the best value of the row: only in a metric row with a goal and a difference. */
  best: number[]
}

/** Indexes of the lowest (goal min) or highest (goal max) values; none when they are all equal. */
function winners(values: (number | null)[], goal: Goal | null): number[] {
  const present = values.filter((v): v is number => v !== null)
  if (!goal || new Set(present).size < 2) return []
  const target = goal === 'min' ? Math.min(...present) : Math.max(...present)
  return values.flatMap((v, i) => (v === target ? [i] : []))
}

const differ = (cells: string[]) => new Set(cells).size > 1

/**
 * The comparison as one table: the hyperparameters (the server says which differ), then each
 * metric's final value and, where the metric has a goal, its best; the best run of a metric row is
 * marked.
 */
export function sideBySideRows(comparison: Comparison): SideBySideRow[] {
  const rows: SideBySideRow[] = comparison.hyperparameters.map((h) => ({
    key: `h:${h.name}`,
    group: 'hyperparameters',
    name: h.name,
    goal: null,
    cells: h.values.map(formatCell),
    differs: h.differs,
    best: [],
  }))
  const metrics = [...comparison.metrics].sort((a, b) => byChartOrder(a.name, b.name))
  for (const group of ['final', 'best'] as const) {
    for (const metric of metrics) {
      if (group === 'best' && !metric.goal) continue
      const format = metricFormatter(metric.name)
      const values = metric.values.map((v) => (group === 'final' ? v.last : v.best))
      const cells = values.map((v) => (v === null ? '—' : format(v)))
      rows.push({
        key: `${group}:${metric.name}`,
        group,
        name: metric.name,
        goal: metric.goal,
        cells,
        // Compared exactly, not as shown: 0.12341 and 0.12342 differ though both read 0.1234.
        differs: new Set(values).size > 1 || differ(cells),
        best: winners(values, metric.goal),
      })
    }
  }
  return rows
}
