import { GoodputBar, GoodputLegend } from '../../../components/GoodputBar'
import { formatDuration } from '../../../lib/format'
import { formatShare } from '../../../lib/goodput'
import { useJobGoodput } from '../api/get-goodput'

/**
 * The job's goodput: its wall time from submission to end (or now) split into queued, preempted,
 * code fetch, environment build, launch, training, checkpoints, recovery, lost work, hang and idle,
 * as a stacked bar with its key, then the same per attempt when there were several. `seen`: the
 * job's state events so far (each transition refetches).
 */
export function GoodputPanel({ jobId, seen }: { jobId: number; seen: number }) {
  const goodput = useJobGoodput(jobId, seen)
  const data = goodput.data
  return (
    <section className="panel goodput-panel" aria-label="Goodput">
      <header className="panel-header">
        <h2>Goodput</h2>
        {data && (
          <span className="muted small" data-testid="goodput-summary">
            {formatShare(data.goodput)} of {formatDuration(data.wall_seconds)} training
            {data.live ? ' so far' : ''}
          </span>
        )}
      </header>
      {!data ? (
        <p className="muted">{goodput.isError ? 'Goodput is unavailable.' : 'Loading…'}</p>
      ) : (
        <>
          <GoodputBar parts={data.parts} label="The whole job" />
          <GoodputLegend parts={data.parts} />
          {data.attempts.length > 1 && (
            <ol className="goodput-attempts" aria-label="Attempts">
              {data.attempts.map((a) => (
                <li key={a.attempt} data-attempt={a.attempt}>
                  <span className="goodput-attempt-label">
                    Attempt {a.attempt}
                    <span className="muted small">
                      {' '}
                      {formatDuration(a.wall_seconds)}, {formatShare(a.goodput)} training
                    </span>
                  </span>
                  <GoodputBar parts={a.parts} label={`Attempt ${a.attempt}`} />
                </li>
              ))}
            </ol>
          )}
        </>
      )}
    </section>
  )
}
