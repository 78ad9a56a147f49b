import { isApiError } from '../../../lib/api'
import type { JobDetail, StacksEvent } from '../../../lib/types'
import { useRequestStacks } from '../api/request-stacks'

/**
 * Where every rank is right now, for a job that looks slow rather than dead: the button asks each
 * running node's agent to read its ranks' Python stacks from outside (py-spy, nothing is paused);
 * each node's answer arrives as a `stacks` event on the job's stream. The latest request's are shown.
 */
export function StacksPanel({ job, stacks }: { job: JobDetail; stacks: StacksEvent[] }) {
  const ask = useRequestStacks()
  const request = ask.data?.request ?? stacks.at(-1)?.request
  const answers = stacks.filter((e) => e.request === request).sort((a, b) => (a.node_rank ?? 0) - (b.node_rank ?? 0))
  const ranks = answers.flatMap((e) => e.ranks.map((r) => ({ ...r, node: e }))).sort((a, b) => a.rank - b.rank)
  const asked = ask.data && ask.data.request === request ? ask.data.nodes.length : answers.length
  if (job.status !== 'running' && !answers.length) return null
  const error = ask.error && (isApiError(ask.error) ? ask.error.message : String(ask.error))
  return (
    <section className="panel" aria-label="Stacks">
      <header className="panel-header">
        <h2>Where every rank is</h2>
        {job.status === 'running' && (
          <button type="button" className="small" onClick={() => ask.mutate(job.id)} disabled={ask.isPending}>
            {answers.length ? 'Read stacks again' : 'Read stacks now'}
          </button>
        )}
      </header>
      {error && <p className="text-bad" role="alert">{error}</p>}
      {request && (
        <p className="muted">
          {answers.length} of {asked} node(s) answered; every rank's Python stack, read from outside with py-spy
          {answers[0] ? ` at ${new Date(answers[0].ts).toLocaleTimeString()}` : ''}.
        </p>
      )}
      {ranks.map((r) => (
        <details key={`${r.node.id}-${r.rank}`} className="stall">
          <summary>
            rank {r.rank} on {r.node.hostname} (node {r.node.node_rank}, pid {r.pid}, {r.process_state})
            {r.waits_in ? `: waits in ${r.waits_in}` : r.frame ? `: in ${r.frame}` : ''}
          </summary>
          <pre className="stack">{r.stack}</pre>
        </details>
      ))}
    </section>
  )
}
