import type { JobDetail, PreflightEvent, StalledEvent } from '../../../lib/types'
import { stallWhat } from '../timeline'

/**
 * What the nodes found before and while training: each node's preflight (the master reached, the
 * versions agreed) and the ranks that stalled, with the control plane's verdict (naming the rank and
 * machine that holds the job when the evidence says so, and the machines it quarantined), each
 * rank's Python stack and the deadline that applied. Hidden until there is something to show.
 */
export function HealthPanel({
  job,
  preflight,
  stalls,
}: {
  job: JobDetail
  preflight: PreflightEvent[]
  stalls: StalledEvent[]
}) {
  const checks = preflight.filter((e) => (e.attempt ?? 0) === job.attempt).sort((a, b) => (a.node_rank ?? 0) - (b.node_rank ?? 0))
  const verdict = job.progress.stall?.attempt === job.attempt ? job.progress.stall : undefined
  if (!checks.length && !stalls.length) return null
  return (
    <section className="panel" aria-label="Health">
      <header className="panel-header">
        <h2>Preflight and stalls</h2>
      </header>
      {checks.length > 0 && (
        <ul className="preflight-list">
          {checks.map((e) => (
            <li key={e.id} className={e.ok ? undefined : 'text-bad'}>
              <strong>node {e.node_rank}</strong> {e.hostname ? <span className="muted">({e.hostname})</span> : null}{' '}
              {describePreflight(e)}
            </li>
          ))}
        </ul>
      )}
      {verdict && (
        <p className="stall-verdict text-bad" role="alert">
          Stalled: {verdict.summary}
        </p>
      )}
      {verdict && verdict.quarantined.length > 0 && (
        <p className="muted">
          Quarantined (nothing is placed there until released, on the Machines page or by its health check):{' '}
          {verdict.quarantined.join(', ')}
        </p>
      )}
      {stalls
        .slice()
        .reverse()
        .map((e) => (
          <details key={e.id} className="stall">
            <summary>
              attempt {e.attempt ?? 0}, rank {e.rank} on {e.hostname}: {stallWhat(e)}{e.silent ? '' : ` after step ${e.step}`}{' '}
              (process {e.process_state}{describeStack(e)}){e.on_stall === 'recover' ? '; on_stall: recover ended its node' : ''}
            </summary>
            {e.timeout_basis && (
              <p className="muted">
                deadline {e.timeout} s: {e.timeout_basis}
              </p>
            )}
            {e.last_line && (
              <p className="muted">
                last line: <span className="mono">{e.last_line}</span>
              </p>
            )}
            <pre className="stack">{e.stack}</pre>
          </details>
        ))}
    </section>
  )
}

/** Where the rank's main thread was: waiting in a collective, or outside any (the one the others wait for?). */
function describeStack(e: StalledEvent): string {
  if (e.waits_in) return `; waits in ${e.waits_in}`
  if (e.waits_in === '') return `; outside any collective${e.frame ? `, in ${e.frame}` : ''}`
  return ''
}

function describePreflight(e: PreflightEvent): string {
  if (!e.ok) return `failed: ${e.error ?? 'unknown error'}`
  const versions = e.torch ? `, torch ${e.torch} on Python ${e.python}` : ''
  const via = e.interface ? ` through ${e.interface}` : ''
  if (e.role === 'master') return `master: every node reached it${via}${versions}`
  return `reached the master ${e.master} from ${e.local_address}${via} in ${e.connect_ms} ms${versions}`
}
