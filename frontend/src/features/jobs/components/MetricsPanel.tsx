import { useMemo } from 'react'
import { LineChart } from '../../../components/LineChart'
import { metricFormatter } from '../../../lib/format'
import type { MetricEvent } from '../../../lib/types'
import { useMetricHistory } from '../api/get-metrics'
import { metricNames, primarySeries, seriesFor } from '../metric-series'

function MetricChart({ name, series }: { name: string; series: ReturnType<typeof seriesFor> }) {
  const format = metricFormatter(name)
  const last = series.at(-1)?.points.at(-1)?.y
  return (
    <div className="metric-block" data-metric={name}>
      <div className="metric-head">
        <h3>{name}</h3>
        <span className="metric-value" data-testid={`${name}-value`}>
          {last == null ? '—' : name === 'throughput' ? `${format(last)}/s` : format(last)}
        </span>
      </div>
      <LineChart series={series} label={name} formatY={format} syncKey="job-metrics" />
    </div>
  )
}

/** A chart per reported metric, one line per attempt, zoomable; history from the API, then live. */
export function MetricsPanel({ jobId, metrics }: { jobId: number; metrics: MetricEvent[] }) {
  const history = useMetricHistory(jobId)
  const main = useMemo(() => primarySeries(metrics), [metrics])
  const names = useMemo(() => metricNames(history.data, main), [history.data, main])
  const charts = useMemo(() => names.map((name) => ({ name, series: seriesFor(name, history.data, main) })), [names, history.data, main])

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
            <MetricChart key={c.name} name={c.name} series={c.series} />
          ))}
        </div>
      )}
    </section>
  )
}
