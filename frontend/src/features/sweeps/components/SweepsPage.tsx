import { Link } from 'react-router-dom'
import { QueryError } from '../../../components/QueryError'
import { StatusBadge } from '../../../components/StatusBadge'
import { useSweeps } from '../api/sweeps'
import { formatParams } from './format'

/** Every sweep the user can see: its state, how far it got, and its best trial so far. */
export function SweepsPage() {
  const sweeps = useSweeps()
  return (
    <section className="panel" aria-labelledby="sweeps-title">
      <header className="panel-header">
        <h2 id="sweeps-title">Sweeps</h2>
        <span className="muted small">searches over hyperparameters, each trial a job: `torchyard sweep sweep.yaml`</span>
      </header>
      {sweeps.error ? (
        <QueryError error={sweeps.error} what="sweeps" onRetry={() => void sweeps.refetch()} retrying={sweeps.isFetching} />
      ) : !sweeps.data ? (
        <p className="empty">Loading sweeps…</p>
      ) : sweeps.data.length === 0 ? (
        <p className="empty">No sweep yet. Submit one with `torchyard sweep sweep.yaml` (see the Sweeps guide).</p>
      ) : (
        <table className="table">
          <thead>
            <tr>
              <th>Sweep</th>
              <th>Project</th>
              <th>Status</th>
              <th>Trials done</th>
              <th>Best</th>
            </tr>
          </thead>
          <tbody>
            {sweeps.data.map((s) => {
              const done = s.counts.completed + s.counts.pruned + s.counts.failed
              return (
                <tr key={s.id}>
                  <td>
                    <Link to={`/sweeps/${s.id}`}>
                      #{s.id} {s.name}
                    </Link>
                  </td>
                  <td>{s.project}</td>
                  <td>
                    <StatusBadge status={s.status} title={s.reason} />
                  </td>
                  <td>
                    {done} / {s.counts.max_trials}
                    {s.counts.running ? `, ${s.counts.running} running` : ''}
                  </td>
                  <td className="mono small">
                    {s.best_trial ? `${s.best_trial.metric.toPrecision(4)} (${formatParams(s.best_trial.hyperparameters)})` : '—'}
                  </td>
                </tr>
              )
            })}
          </tbody>
        </table>
      )}
    </section>
  )
}
