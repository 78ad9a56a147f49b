import { ProgressBar } from '../../../components/ProgressBar'
import { RelativeTime } from '../../../components/RelativeTime'
import { StatusBadge } from '../../../components/StatusBadge'
import { formatLoss, formatNumber } from '../../../lib/format'
import type { JobDetail, JobNode, Machine } from '../../../lib/types'
import { useMachines } from '../../machines/api/get-machines'

/** The machine's CPU use and the mean use of the GPUs this node holds ("—" before the agent says). */
function usageOf(node: JobNode, machine: Machine | undefined): { cpu: string; gpu: string } {
  const load = machine?.current_load
  const cpu = load?.cpu_usage == null ? '—' : `${Math.round(load.cpu_usage)}%`
  const gpus = node.gpus ?? []
  const used = gpus.map((i) => load?.gpu_usage?.[i]).filter((v): v is number => typeof v === 'number')
  const gpu = gpus.length === 0 ? 'none' : used.length ? `${Math.round(used.reduce((a, b) => a + b, 0) / used.length)}%` : '—'
  return { cpu, gpu }
}

function percentLabel(step: number | null | undefined, total: number | null | undefined): string | undefined {
  if (step == null) return undefined
  if (!total) return `step ${step}`
  return `${step} / ${total} (${Math.min(100, Math.round((step / total) * 100))}%)`
}

/** One card per node of the current attempt: where it runs, how far it got, how alive it is. */
export function NodeCards({ job }: { job: JobDetail }) {
  const machines = useMachines()
  const byId = new Map((machines.data ?? []).map((m) => [m.id, m]))
  const current = job.nodes.filter((n) => n.attempt === job.attempt)
  const nodes = (current.length ? current : job.nodes).slice().sort((a, b) => a.node_rank - b.node_rank)
  if (nodes.length === 0) {
    return <p className="empty">No nodes yet: the job has not been dispatched.</p>
  }
  return (
    <div className="node-grid">
      {nodes.map((node) => {
        const restarts = job.nodes.filter((n) => n.node_rank === node.node_rank && n.attempt < node.attempt).length
        const usage = usageOf(node, node.machine.id == null ? undefined : byId.get(node.machine.id))
        const step = node.progress?.step
        return (
          <article key={node.id} className={`node-card node-${node.status}`} aria-label={`Node ${node.node_rank}`}>
            <header>
              <strong>node {node.node_rank}</strong>
              <span className="muted mono small">
                ranks {node.rank_start}..{node.rank_end}
              </span>
              <StatusBadge status={node.status} />
            </header>
            <div className="node-machine" title={node.machine.host}>
              {node.machine.name} <span className="muted mono">{node.machine.host}</span>
            </div>
            <ProgressBar value={step ?? null} max={job.progress.total_steps} label={percentLabel(step, job.progress.total_steps)} />
            <dl className="node-facts">
              <dt>loss</dt>
              <dd>{formatLoss(node.progress?.loss)}</dd>
              <dt>tput</dt>
              <dd>{node.progress?.throughput == null ? '—' : `${formatNumber(node.progress.throughput, 1)}/s`}</dd>
              <dt>CPU</dt>
              <dd>{usage.cpu}</dd>
              <dt>GPU</dt>
              <dd>{usage.gpu}</dd>
              <dt>beat</dt>
              <dd>
                <RelativeTime iso={node.last_heartbeat} />
              </dd>
              <dt>restarts</dt>
              <dd className={restarts ? 'text-warn' : undefined}>{restarts}</dd>
              {node.exit_code != null && (
                <>
                  <dt>exit</dt>
                  <dd className={node.exit_code ? 'text-bad' : undefined}>{node.exit_code}</dd>
                </>
              )}
            </dl>
          </article>
        )
      })}
    </div>
  )
}
