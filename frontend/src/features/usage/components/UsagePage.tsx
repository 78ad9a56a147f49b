import { useMemo } from 'react'
import { useSearchParams } from 'react-router-dom'
import { LineChart } from '../../../components/LineChart'
import { QueryError } from '../../../components/QueryError'
import type { UsageGroup } from '../../../lib/types'
import { USAGE_GROUPS, USAGE_WINDOWS, useUsage, type UsageWindow } from '../api/get-usage'
import { formatHours, hasUsage, usageCharts } from '../usage-series'
import '../usage.css'
import { UsageGoodput } from './UsageGoodput'
import { UsageTable } from './UsageTable'

// More keys than this (a cluster's users or machines) are in the table, not charted.
const MAX_CHARTS = 12

const isGroup = (value: string | null): value is UsageGroup => USAGE_GROUPS.includes(value as UsageGroup)
const isWindow = (value: string | null): value is UsageWindow => value !== null && value in USAGE_WINDOWS

function Choice<T extends string>({
  label,
  options,
  value,
  onChange,
}: {
  label: string
  options: { value: T; label: string }[]
  value: T
  onChange: (value: T) => void
}) {
  return (
    <div className="choice" role="group" aria-label={label}>
      {options.map((o) => (
        <button key={o.value} type="button" aria-pressed={o.value === value} onClick={() => onChange(o.value)}>
          {o.label}
        </button>
      ))}
    </div>
  )
}

/**
 * Who used the cluster: GPU-hours and process-hours by project (or user, or machine) over the last
 * day, week or month, a chart per key over time and the totals; then the goodput of the same keys'
 * jobs, with what their GPU-hours cost. The choice lives in the URL
 * (?by=user&window=30d), so a view can be shared.
 */
export function UsagePage() {
  const [params, setParams] = useSearchParams()
  const by: UsageGroup = isGroup(params.get('by')) ? (params.get('by') as UsageGroup) : 'project'
  const period: UsageWindow = isWindow(params.get('window')) ? (params.get('window') as UsageWindow) : '7d'
  const usage = useUsage(by, period)
  const charts = useMemo(() => (usage.data ? usageCharts(usage.data, MAX_CHARTS) : []), [usage.data])
  const set = (key: 'by' | 'window', value: string) =>
    setParams(
      (old) => {
        const next = new URLSearchParams(old)
        next.set(key, value)
        return next
      },
      { replace: true },
    )

  const data = usage.data
  const used = data ? hasUsage(data.totals) : false
  const gpuHours = data?.totals.reduce((sum, t) => sum + t.gpu_hours, 0) ?? 0
  const processHours = data?.totals.reduce((sum, t) => sum + t.process_hours, 0) ?? 0

  return (
    <>
      <section className="panel usage-page" aria-labelledby="usage-title">
        <header className="panel-header">
          <h2 id="usage-title">Usage</h2>
          {data && used && (
            <span className="muted" data-testid="usage-summary">
              {formatHours(gpuHours)} GPU-hours, {formatHours(processHours)} process-hours in {USAGE_WINDOWS[period].span}
            </span>
          )}
          <div className="spacer" />
          {usage.isFetching && usage.isPlaceholderData && <span className="muted small">updating…</span>}
        </header>
        <div className="usage-controls">
          <Choice
            label="Group by"
            value={by}
            onChange={(value) => set('by', value)}
            options={USAGE_GROUPS.map((g) => ({ value: g, label: `By ${g}` }))}
          />
          <Choice
            label="Window"
            value={period}
            onChange={(value) => set('window', value)}
            options={(Object.keys(USAGE_WINDOWS) as UsageWindow[]).map((w) => ({ value: w, label: USAGE_WINDOWS[w].label }))}
          />
        </div>
        {usage.isPending && <p className="muted">Loading…</p>}
        {usage.isError && <QueryError error={usage.error} what="usage" onRetry={() => void usage.refetch()} retrying={usage.isFetching} />}
        {data && !used && (
          <p className="empty usage-empty">
            No GPU or process time was used in {USAGE_WINDOWS[period].span}
            {by === 'project' ? ' by your projects' : ''}: it is counted from each node's start to its end.
          </p>
        )}
        {data && used && (
          <>
            <UsageTable totals={data.totals} by={by} />
            <div className="metrics usage-charts">
              {charts.map((chart) => (
                <div className="metric-block" key={chart.key} data-usage-key={chart.key}>
                  <div className="metric-head">
                    <h3>{chart.key}</h3>
                    <span className="muted small">per {USAGE_WINDOWS[period].bucket}</span>
                  </div>
                  <LineChart
                    series={chart.series}
                    label={`${chart.key} usage`}
                    height={160}
                    formatY={formatHours}
                    syncKey="usage"
                    xTime
                  />
                </div>
              ))}
            </div>
            {data.totals.length > MAX_CHARTS && (
              <p className="muted small">
                Charts for the first {MAX_CHARTS} of {data.totals.length}; every {by} is in the table.
              </p>
            )}
          </>
        )}
      </section>
      <UsageGoodput by={by} period={period} />
    </>
  )
}
