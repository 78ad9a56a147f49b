import { ProgressBar } from '../../../components/ProgressBar'
import { RelativeTime } from '../../../components/RelativeTime'
import { StatusBadge } from '../../../components/StatusBadge'
import { formatLoss, formatNumber } from '../../../lib/format'
import type { JobDetail } from '../../../lib/types'

/** One card per node of the current attempt. */
export function NodeCards({ job }: { job: JobDetail }) {
  const current = job.nodes.filter((n) => n.attempt === job.attempt)
  const nodes = (current.length ? current : job.nodes).slice().sort((a, b) => a.node_rank - b.node_rank)
  if (nodes.length === 0) {
    return <p className="empty">No nodes yet: the job has not been dispatched.</p>
  }
  return (
    <div className="node-grid">
      {nodes.map((node) => (
        <article key={node.id} className="node-card" aria-label={`Node ${node.node_rank}`}>
          <header>
            <strong>node {node.node_rank}</strong>
            <StatusBadge status={node.status} />
          </header>
          <div className="node-machine" title={node.machine.host}>
            {node.machine.name} <span className="muted mono">{node.machine.host}</span>
          </div>
          <dl className="node-facts">
            <dt>ranks</dt>
            <dd className="mono">
              {node.rank_start}..{node.rank_end}
            </dd>
            <dt>procs</dt>
            <dd>{node.nproc}</dd>
            <dt>exit</dt>
            <dd className={node.exit_code ? 'text-bad' : undefined}>{node.exit_code ?? '—'}</dd>
            <dt>loss</dt>
            <dd>{formatLoss(node.progress?.loss)}</dd>
            <dt>tput</dt>
            <dd>{node.progress?.throughput == null ? '—' : `${formatNumber(node.progress.throughput, 1)}/s`}</dd>
            <dt>beat</dt>
            <dd>
              <RelativeTime iso={node.last_heartbeat} />
            </dd>
          </dl>
          <ProgressBar value={node.progress?.step ?? null} max={job.progress.total_steps} />
        </article>
      ))}
    </div>
  )
}
