import { useMemo, useState } from 'react'
import { Link, useParams } from 'react-router-dom'
import { LineChart } from '../../../components/LineChart'
import { ProgressBar } from '../../../components/ProgressBar'
import { QueryError } from '../../../components/QueryError'
import { StatusBadge } from '../../../components/StatusBadge'
import { isFinal, type Sweep, type Trial, useSweep, useSweepAction, useTrialCurves } from '../api/sweeps'
import '../sweeps.css'
import { formatParams } from './format'
import { ParallelCoordinates } from './ParallelCoordinates'

type SortKey = 'number' | 'value' | 'status'

/** One sweep: how far it got, its best trial, every trial's curve and point, and its trials. */
export function SweepDetailPage() {
  const id = Number(useParams().id)
  const sweep = useSweep(id)
  if (sweep.error) return <QueryError error={sweep.error} what={`sweep ${id}`} onRetry={() => void sweep.refetch()} retrying={sweep.isFetching} />
  if (!sweep.data) return <p className="empty">Loading sweep {id}…</p>
  return <SweepView sweep={sweep.data} />
}

function SweepView({ sweep }: { sweep: Sweep }) {
  const searcher = sweep.spec.searcher as { name: string; metric: string; mode: 'min' | 'max'; max_concurrent: number }
  const space = sweep.spec.space as Record<string, Record<string, unknown>>
  const action = useSweepAction(sweep.id)
  const { counts } = sweep
  const done = counts.completed + counts.pruned + counts.failed
  const best = sweep.best_trial?.number ?? null
  return (
    <div className="sweep-page">
      <section className="panel" aria-labelledby="sweep-title">
        <header className="panel-header">
          <h2 id="sweep-title">
            <Link to="/sweeps">Sweeps</Link> / #{sweep.id} {sweep.name}
          </h2>
          <StatusBadge status={sweep.status} title={sweep.reason} />
          <span className="muted small">
            {searcher.name}, {searcher.metric} ({searcher.mode}), {searcher.max_concurrent} at a time, project {sweep.project}
          </span>
          <div className="spacer" />
          <button type="button" disabled={sweep.status !== 'running' || action.isPending} onClick={() => action.mutate('stop')}>
            Stop
          </button>
          <button type="button" disabled={sweep.status !== 'stopped' || action.isPending} onClick={() => action.mutate('resume')}>
            Resume
          </button>
        </header>
        {action.error && <p className="text-bad small">{String(action.error)}</p>}
        <div className="sweep-summary">
          <div>
            <ProgressBar value={done} max={counts.max_trials} label={`${done} / ${counts.max_trials} trials done`} />
            <p className="small">
              {counts.running} running · {counts.completed} completed · {counts.pruned} pruned · {counts.failed} failed
              {counts.stopped ? ` · ${counts.stopped} stopped` : ''}
            </p>
            {sweep.reason && <p className="muted small">{sweep.reason}</p>}
          </div>
          <div className="sweep-best" aria-label="best trial">
            <h3>Best so far</h3>
            {sweep.best_trial ? (
              <>
                <p className="sweep-metric">
                  {searcher.metric} {sweep.best_trial.metric.toPrecision(4)}
                </p>
                <p className="small">
                  trial {sweep.best_trial.number}
                  {sweep.best_trial.job != null && (
                    <>
                      {' '}
                      · <Link to={`/jobs/${sweep.best_trial.job}`}>job #{sweep.best_trial.job}</Link>
                    </>
                  )}
                </p>
                <p className="mono small">{formatParams(sweep.best_trial.hyperparameters)}</p>
              </>
            ) : (
              <p className="muted small">no trial completed yet</p>
            )}
          </div>
        </div>
      </section>
      <TrialCurves trials={sweep.trials} metric={searcher.metric} live={!isFinal(sweep.status)} />
      <section className="panel" aria-labelledby="sweep-points-title">
        <header className="panel-header">
          <h2 id="sweep-points-title">Hyperparameters and {searcher.metric}</h2>
          <span className="muted small">one line a trial; pruned ones faded, the best in green</span>
        </header>
        <ParallelCoordinates trials={sweep.trials} space={space} metric={searcher.metric} best={best} />
      </section>
      <TrialsTable trials={sweep.trials} metric={searcher.metric} mode={searcher.mode} best={best} />
    </div>
  )
}

function TrialCurves({ trials, metric, live }: { trials: Trial[]; metric: string; live: boolean }) {
  const curves = useTrialCurves(trials, metric, live)
  const series = curves
    .map((c) => c.data)
    .filter((c): c is NonNullable<typeof c> => !!c && c.points.length > 0)
    .map((c) => ({ label: `trial ${c.trial.number}${c.trial.status === 'pruned' ? ' (pruned)' : ''}`, points: c.points }))
  return (
    <section className="panel" aria-labelledby="sweep-curves-title">
      <header className="panel-header">
        <h2 id="sweep-curves-title">{metric} of every trial</h2>
        <span className="muted small">by step, as each trial reported it</span>
      </header>
      <LineChart series={series} label={`${metric} of every trial`} height={240} />
    </section>
  )
}

function TrialsTable({ trials, metric, mode, best }: { trials: Trial[]; metric: string; mode: 'min' | 'max'; best: number | null }) {
  const [sort, setSort] = useState<SortKey>('number')
  const sorted = useMemo(() => {
    const rows = [...trials]
    if (sort === 'value') {
      const missing = mode === 'min' ? Infinity : -Infinity
      rows.sort((a, b) => ((a.value ?? missing) - (b.value ?? missing)) * (mode === 'min' ? 1 : -1))
    } else if (sort === 'status') rows.sort((a, b) => a.status.localeCompare(b.status) || a.number - b.number)
    else rows.sort((a, b) => a.number - b.number)
    return rows
  }, [trials, sort, mode])
  const header = (key: SortKey, text: string) => (
    <th aria-sort={sort === key ? 'ascending' : undefined}>
      <button type="button" className="link-button" onClick={() => setSort(key)}>
        {text}
      </button>
    </th>
  )
  return (
    <section className="panel" aria-labelledby="sweep-trials-title">
      <header className="panel-header">
        <h2 id="sweep-trials-title">Trials</h2>
        <span className="muted small">{trials.length} asked; click a heading to sort</span>
      </header>
      <table className="table">
        <thead>
          <tr>
            {header('number', 'Trial')}
            <th>Job</th>
            {header('status', 'Status')}
            {header('value', metric)}
            <th>Step</th>
            <th>Hyperparameters</th>
            <th>Why</th>
          </tr>
        </thead>
        <tbody>
          {sorted.map((t) => (
            <tr key={t.number} className={t.number === best ? 'sweep-best-row' : t.status === 'pruned' ? 'muted' : undefined}>
              <td>{t.number}</td>
              <td>{t.job != null ? <Link to={`/jobs/${t.job}`}>#{t.job}</Link> : '—'}</td>
              <td>
                <StatusBadge status={t.status} />
              </td>
              <td className="mono">{t.value == null ? '—' : t.value.toPrecision(4)}</td>
              <td>{t.step ?? '—'}</td>
              <td className="mono small">{formatParams(t.params)}</td>
              <td className="small sweep-why">{t.status === 'pruned' || t.status === 'failed' ? t.reason : ''}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  )
}
