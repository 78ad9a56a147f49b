import { useMemo } from 'react'
import { LineChart } from '../../../components/LineChart'
import { metricFormatter } from '../../../lib/format'
import type { MetricEvent, StateEvent } from '../../../lib/types'
import { useMetricHistory } from '../api/get-metrics'
import { metricChart, metricNames, primarySeries, resizesByAttempt, type MetricChartData } from '../metric-series'

function MetricChart({ name, chart }: { name: string; chart: MetricChartData }) {
  const format = metricFormatter(name)
  const last = chart.series.at(-1)?.points.at(-1)?.y
  return (
    <div className="metric-block" data-metric={name}>
      <div className="metric-head">
        <h3>{name}</h3>
        <span className="metric-value" data-testid={`${name}-value`}>
          {last == null ? '—' : name === 'throughput' ? `${format(last)}/s` : format(last)}
        </span>
      </div>
      <LineChart series={chart.series} marks={chart.marks} label={name} formatY={format} syncKey="job-metrics" />
    </div>
  )
}

/**
 * A chart per reported metric, one line per attempt, zoomable; history from the API, then live. An
 * elastic job's resized attempts (from its state events) are named and marked where they start.
 */
export function MetricsPanel({ jobId, metrics, states }: { jobId: number; metrics: MetricEvent[]; states: StateEvent[] }) {
  const history = useMetricHistory(jobId)
  const main = useMemo(() => primarySeries(metrics), [metrics])
  const resizes = useMemo(() => resizesByAttempt(states), [states])
  const names = useMemo(() => metricNames(history.data, main), [history.data, main])
  const charts = useMemo(
    () => names.map((name) => ({ name, chart: metricChart(name, history.data, main, resizes) })),
    [names, history.data, main, resizes],
  )

  return (
    <section className="panel" aria-label="Metrics">
      <header className="panel-header">
        <h2>Metrics</h2>
        <span className="muted small">drag across a chart to zoom, double-click to zoom out</span>
      </header>
      {charts.length === 0 ? (
        <p className="empty">{history.isPending ? 'Loading metrics…' : 'No metrics reported yet.'}</p>
      ) : (
        <div className="metrics">
          {charts.map((c) => (
            <MetricChart key={c.name} name={c.name} chart={c.chart} />
          ))}
        </div>
      )}
    </section>
  )
}
