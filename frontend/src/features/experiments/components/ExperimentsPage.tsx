import { useMemo, useState } from 'react'
import { useSearchParams } from 'react-router-dom'
import { QueryError } from '../../../components/QueryError'
import { useRuns } from '../api/get-runs'
import { MAX_COMPARED, parseRunIds, toggleRun } from '../compare'
import '../experiments.css'
import { CompareView } from './CompareView'
import { RunsTable } from './RunsTable'

/**
 * DistroML's experiments: every run (an attempt of a job) the user can see; they tick several and
 * Compare puts them in the URL (`/experiments?runs=7.1,9.0`), so a comparison is a link to share.
 */
export function ExperimentsPage() {
  const [params, setParams] = useSearchParams()
  const runsParam = params.get('runs')
  const compared = useMemo(() => parseRunIds(runsParam), [runsParam])
  const [selected, setSelected] = useState(compared)
  // A new URL (back, forward, a pasted link) starts the ticks from what it compares.
  const [seenParam, setSeenParam] = useState(runsParam)
  if (seenParam !== runsParam) {
    setSeenParam(runsParam)
    setSelected(compared)
  }
  const runs = useRuns()
  const listed = runs.data
  const unlisted = listed ? selected.filter((id) => !listed.some((run) => run.run_id === id)) : []
  const unchanged = selected.join(',') === compared.join(',')

  const compare = () => setParams(selected.length ? { runs: selected.join(',') } : {})

  return (
    <div className="experiments-page">
      <section className="panel" aria-labelledby="runs-title">
        <header className="panel-header">
          <h2 id="runs-title">Runs</h2>
          <span className="muted small">every attempt of a job is a run: tick two or more, then Compare</span>
          <div className="spacer" />
          <span className="muted small" aria-live="polite">
            {selected.length} selected{selected.length >= MAX_COMPARED ? ` (at most ${MAX_COMPARED})` : ''}
          </span>
          <button type="button" className="small" disabled={selected.length === 0} onClick={() => setSelected([])}>
            Clear
          </button>
          <button type="button" className="primary" disabled={selected.length < 2 || unchanged} onClick={compare}>
            Compare
          </button>
        </header>
        {unlisted.length > 0 && <p className="muted small">Also selected, older than the runs listed: {unlisted.join(', ')}</p>}
        {runs.error ? (
          <QueryError error={runs.error} what="runs" onRetry={() => void runs.refetch()} retrying={runs.isFetching} />
        ) : !listed ? (
          <p className="empty">Loading runs…</p>
        ) : (
          <RunsTable runs={listed} selected={selected} onToggle={(id) => setSelected((s) => toggleRun(s, id))} />
        )}
      </section>
      {compared.length > 0 && <CompareView runIds={compared} />}
    </div>
  )
}
