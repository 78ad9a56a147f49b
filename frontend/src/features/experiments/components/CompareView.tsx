import { useMemo, useState } from 'react'
import { Link } from 'react-router-dom'
import { seriesColour } from '../../../components/chart-data'
import { LineChart } from '../../../components/LineChart'
import { QueryError } from '../../../components/QueryError'
import { StatusBadge } from '../../../components/StatusBadge'
import { metricFormatter } from '../../../lib/format'
import { useComparison, type Comparison } from '../api/compare-runs'
import { compareCharts, runLabel, sideBySideRows, type SideBySideRow } from '../compare'

const GROUPS: [SideBySideRow['group'], string][] = [
  ['hyperparameters', 'Hyperparameters'],
  ['final', 'Final metrics'],
  ['best', 'Best metrics'],
]

function rowTitle(row: SideBySideRow): string {
  if (row.group === 'final') return `${row.name} (last value)`
  if (row.group === 'best') return `${row.name} (${row.goal === 'min' ? 'lowest' : 'highest'})`
  return row.name
}

/** Hyperparameters and final/best metrics, a column per run; rows that differ are highlighted. */
function SideBySideTable({ comparison }: { comparison: Comparison }) {
  const rows = useMemo(() => sideBySideRows(comparison), [comparison])
  const [onlyDiffering, setOnlyDiffering] = useState(false)
  const shown = onlyDiffering ? rows.filter((row) => row.differs) : rows
  const differing = rows.filter((row) => row.differs).length
  return (
    <div className="compare-table-block">
      <div className="panel-header">
        <h3 id="side-by-side-title">Side by side</h3>
        <span className="muted small">
          {differing} of {rows.length} rows differ
        </span>
        <div className="spacer" />
        <label className="inline-label">
          <input type="checkbox" checked={onlyDiffering} onChange={(e) => setOnlyDiffering(e.target.checked)} /> Only
          what differs
        </label>
      </div>
      <div className="runs-scroll">
        <table className="table compare-table" aria-labelledby="side-by-side-title">
          <thead>
            <tr>
              <th scope="col">
                <span className="sr-only">Field</span>
              </th>
              {comparison.runs.map((run, i) => (
                <th key={run.run_id} scope="col">
                  <span className="run-swatch" style={{ background: seriesColour(i) }} aria-hidden="true" />
                  <Link to={`/jobs/${run.job}`}>{run.name}</Link> <span className="mono muted">{run.run_id}</span>{' '}
                  <StatusBadge status={run.status} title={run.status_reason || undefined} />
                </th>
              ))}
            </tr>
          </thead>
          {GROUPS.map(([group, title]) => {
            const inGroup = shown.filter((row) => row.group === group)
            if (inGroup.length === 0) return null
            return (
              <tbody key={group}>
                <tr className="compare-group">
                  <th scope="rowgroup" colSpan={comparison.runs.length + 1}>
                    {title}
                  </th>
                </tr>
                {inGroup.map((row) => (
                  <tr key={row.key} className={row.differs ? 'differs' : undefined} data-differs={row.differs || undefined}>
                    <th scope="row" className="compare-field">
                      {rowTitle(row)}
                      {row.differs && <span className="sr-only"> (differs)</span>}
                    </th>
                    {row.cells.map((cell, i) => {
                      const best = row.best.includes(i)
                      return (
                        <td key={i} className={`compare-cell${best ? ' compare-best' : ''}`} title={cell}>
                          {cell}
                          {best && (
                            <span className="compare-best-mark" title="best of these runs">
                              {' '}
                              ★<span className="sr-only"> best</span>
                            </span>
                          )}
                        </td>
                      )
                    })}
                  </tr>
                ))}
              </tbody>
            )
          })}
        </table>
      </div>
    </div>
  )
}

/** The runs in the URL compared: their metric curves overlaid, one chart per metric, then one table. */
export function CompareView({ runIds }: { runIds: string[] }) {
  const comparison = useComparison(runIds)
  const charts = useMemo(() => (comparison.data ? compareCharts(comparison.data) : []), [comparison.data])
  const data = comparison.data
  return (
    <section className="panel compare-panel" aria-labelledby="compare-title" aria-busy={comparison.isFetching}>
      <header className="panel-header">
        <h2 id="compare-title">Comparison</h2>
        {data && (
          <span className="muted small">
            {data.runs.map(runLabel).join(' vs ')}
            {data.bucket_steps != null && data.bucket_steps > 1 && ` · ${data.bucket_steps} steps per point`}
          </span>
        )}
      </header>
      {comparison.error ? (
        <QueryError error={comparison.error} what="the comparison" onRetry={() => void comparison.refetch()} retrying={comparison.isFetching} />
      ) : !data ? (
        <p className="empty">Loading the comparison…</p>
      ) : (
        <>
          {charts.length === 0 ? (
            <p className="empty">None of these runs reported a metric.</p>
          ) : (
            <>
              <p className="muted small">Drag across a chart to zoom (all charts follow one cursor), double-click to zoom out.</p>
              <div className="metrics compare-charts">
                {charts.map((chart) => (
                  <div className="metric-block" data-metric={chart.name} key={chart.name}>
                    <div className="metric-head">
                      <h3>{chart.name}</h3>
                    </div>
                    <LineChart
                      series={chart.series}
                      label={chart.name}
                      formatY={metricFormatter(chart.name)}
                      syncKey="experiments-compare"
                    />
                  </div>
                ))}
              </div>
            </>
          )}
          <SideBySideTable comparison={data} />
        </>
      )}
    </section>
  )
}
