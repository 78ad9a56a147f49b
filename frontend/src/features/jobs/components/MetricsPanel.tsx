import { useMemo } from 'react'
import { LineChart, type Point } from '../../../components/LineChart'
import { formatLoss, formatNumber } from '../../../lib/format'
import type { CheckpointEvent, MetricEvent } from '../../../lib/types'

/** Metrics from one rank: rank 0 (or job-wide ones) when present, else the lowest rank seen. */
function primarySeries(metrics: MetricEvent[]): MetricEvent[] {
  if (metrics.length === 0) return metrics
  const main = metrics.filter((m) => m.rank === 0 || m.rank == null)
  if (main.length) return main
  const lowest = Math.min(...metrics.map((m) => m.rank ?? 0))
  return metrics.filter((m) => m.rank === lowest)
}

function series(metrics: MetricEvent[], key: 'loss' | 'throughput'): Point[] {
  const out: Point[] = []
  for (const m of metrics) {
    const y = m[key]
    if (typeof y === 'number' && Number.isFinite(y) && typeof m.step === 'number') out.push({ x: m.step, y })
  }
  return out
}

export function MetricsPanel({ metrics, checkpoints }: { metrics: MetricEvent[]; checkpoints: CheckpointEvent[] }) {
  const main = useMemo(() => primarySeries(metrics), [metrics])
  const loss = useMemo(() => series(main, 'loss'), [main])
  const throughput = useMemo(() => series(main, 'throughput'), [main])
  const lastLoss = loss.at(-1)?.y
  const lastThroughput = throughput.at(-1)?.y
  const lastCheckpoint = checkpoints.at(-1)

  return (
    <section className="panel metrics" aria-label="Metrics">
      <div className="metric-block">
        <div className="metric-head">
          <h3>Loss</h3>
          <span className="metric-value">{formatLoss(lastLoss)}</span>
        </div>
        <LineChart points={loss} label="Loss" formatY={(y) => formatLoss(y)} />
      </div>
      <div className="metric-block">
        <div className="metric-head">
          <h3>Throughput</h3>
          <span className="metric-value" data-testid="throughput-value">
            {lastThroughput == null ? '—' : `${formatNumber(lastThroughput, 1)}/s`}
          </span>
        </div>
        <LineChart points={throughput} label="Throughput" formatY={(y) => formatNumber(y, 1)} />
        <p className="muted small">
          {lastCheckpoint
            ? `Last checkpoint: step ${lastCheckpoint.step} (${checkpoints.length} this session)`
            : 'No checkpoint yet'}
        </p>
      </div>
    </section>
  )
}
