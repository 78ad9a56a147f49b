import { formatClock, formatNumber } from '../../../lib/format'
import type { JobDetail, Straggler, StragglerEvent } from '../../../lib/types'

/**
 * Ranks much slower than the job's others: each one now (its own time per step, the part not spent
 * waiting on its peers, against the median of the others', and what its machine showed), and what
 * `fault_tolerance.stragglers: replace` did about it; below, every straggler named and cleared so far.
 * Hidden until a rank has been named.
 */
export function StragglersPanel({ job, events }: { job: JobDetail; events: StragglerEvent[] }) {
  const now = job.progress.stragglers ?? []
  if (!now.length && !events.length) return null
  return (
    <section className="panel" aria-label="Stragglers">
      <header className="panel-header">
        <h2>Stragglers</h2>
      </header>
      {now.length > 0 ? (
        <table className="table">
          <thead>
            <tr>
              <th>Rank</th>
              <th>Machine</th>
              <th>Own step</th>
              <th>Others' median</th>
              <th>What the machine shows</th>
              <th>Replace</th>
            </tr>
          </thead>
          <tbody>
            {now.map((s) => (
              <tr key={s.rank} className="text-bad">
                <td>{s.rank}</td>
                <td>{s.machine ?? '?'}</td>
                <td>
                  {formatNumber(s.own_step_s, 3)} s{s.ratio ? ` (${s.ratio}x)` : ''}
                </td>
                <td>{formatNumber(s.median_s, 3)} s</td>
                <td className="cell-text">{s.evidence}</td>
                <td className="cell-text">{replaceText(s)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      ) : (
        <p className="muted">Every rank keeps up now.</p>
      )}
      {events.length > 0 && (
        <ul className="straggler-history">
          {events
            .slice()
            .reverse()
            .map((e) => (
              <li key={e.id} className={e.state === 'named' ? undefined : 'muted'}>
                <span className="mono">{formatClock(e.ts)}</span> attempt {e.attempt ?? 0}: {e.summary}
              </li>
            ))}
        </ul>
      )}
    </section>
  )
}

function replaceText(s: Straggler): string {
  if (s.policy !== 'replace') return 'reported only (policy report)'
  if (s.replace === 'pending') return 'onto a hot spare at the next committed checkpoint'
  return s.replace ?? ''
}
