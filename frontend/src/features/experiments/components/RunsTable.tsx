import { useMemo, useState } from 'react'
import { Link } from 'react-router-dom'
import { RelativeTime } from '../../../components/RelativeTime'
import { StatusBadge } from '../../../components/StatusBadge'
import { metricFormatter } from '../../../lib/format'
import type { Run } from '../api/get-runs'
import { finalMetric, hyperparameterSummary, listedMetricNames } from '../compare'

interface RunsTableProps {
  runs: Run[]
  selected: string[]
  onToggle: (runId: string) => void
}

const matches = (run: Run, text: string) =>
  [run.run_id, run.name, run.project, run.owner, run.status].some((field) => field.toLowerCase().includes(text))

/**
 * Every listed run with a checkbox to pick it for comparison (Tab to it, Space to tick), its job,
 * status, hyperparameters and the final and best value of one metric, chosen above the table.
 */
export function RunsTable({ runs, selected, onToggle }: RunsTableProps) {
  const names = useMemo(() => listedMetricNames(runs), [runs])
  const [picked, setPicked] = useState<string | null>(null)
  const [filter, setFilter] = useState('')
  // The metric picked, while some run still reports it; else loss, or the first there is.
  const metric = picked && names.includes(picked) ? picked : names.includes('loss') ? 'loss' : (names[0] ?? null)
  const format = metricFormatter(metric ?? '')
  const text = filter.trim().toLowerCase()
  const shown = text ? runs.filter((run) => matches(run, text)) : runs

  if (runs.length === 0) return <p className="empty">No runs yet: every attempt of a job you can see is a run.</p>
  return (
    <>
      <div className="runs-controls">
        <label className="inline-label">
          Filter
          <input type="search" value={filter} onChange={(e) => setFilter(e.target.value)} placeholder="name, project, status…" />
        </label>
        {names.length > 0 && (
          <label className="inline-label">
            Metric
            <select value={metric ?? ''} onChange={(e) => setPicked(e.target.value)}>
              {names.map((name) => (
                <option key={name} value={name}>
                  {name}
                </option>
              ))}
            </select>
          </label>
        )}
      </div>
      <div className="runs-scroll">
        <table className="table runs-table" aria-label="Runs">
          <thead>
            <tr>
              <th>
                <span className="sr-only">Compare</span>
              </th>
              <th>Run</th>
              <th>Job</th>
              <th className="num">Attempt</th>
              <th>Status</th>
              <th>Project</th>
              <th className="num">World</th>
              <th>Started</th>
              <th>Hyperparameters</th>
              <th className="num">{metric ? `Final ${metric}` : 'Final'}</th>
              <th className="num">{metric ? `Best ${metric}` : 'Best'}</th>
            </tr>
          </thead>
          <tbody>
            {shown.map((run) => {
              const checked = selected.includes(run.run_id)
              const value = metric ? finalMetric(run, metric) : undefined
              const hyperparameters = hyperparameterSummary(run.hyperparameters)
              return (
                <tr key={run.run_id} className={checked ? 'run-selected' : undefined}>
                  <td>
                    <input
                      type="checkbox"
                      checked={checked}
                      onChange={() => onToggle(run.run_id)}
                      aria-label={`Compare run ${run.run_id} (${run.name})`}
                    />
                  </td>
                  <td className="mono">{run.run_id}</td>
                  <td className="strong">
                    <Link to={`/jobs/${run.job}`}>{run.name}</Link>
                  </td>
                  <td className="num">{run.attempt}</td>
                  <td>
                    <StatusBadge status={run.status} title={run.status_reason || undefined} />
                  </td>
                  <td className="muted">{run.project}</td>
                  <td className="num">{run.world_size ?? '—'}</td>
                  <td className="muted">{run.started_at ? <RelativeTime iso={run.started_at} intervalMs={30_000} /> : '—'}</td>
                  <td className="muted small runs-hyperparameters" title={hyperparameters}>
                    {hyperparameters || '—'}
                  </td>
                  <td className="num" title={value?.last_step != null ? `at step ${value.last_step}` : undefined}>
                    {value ? format(value.last) : '—'}
                  </td>
                  <td className="num" title={value?.goal ? `${value.goal} over the run` : undefined}>
                    {value?.best != null ? format(value.best) : '—'}
                  </td>
                </tr>
              )
            })}
          </tbody>
        </table>
        {shown.length === 0 && <p className="empty">No run matches “{filter}”.</p>}
      </div>
    </>
  )
}
