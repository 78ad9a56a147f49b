import { ProgressBar } from '../../../components/ProgressBar'
import { RelativeTime } from '../../../components/RelativeTime'
import { StatusBadge } from '../../../components/StatusBadge'
import { formatBytes, formatLoss, formatNumber } from '../../../lib/format'
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

type NodeRay = NonNullable<JobNode['progress']['ray']>

/** Ray's ports in `ray start`'s order; the worker processes' range (min_worker..max_worker) after them. */
const RAY_PORTS = ['dashboard', 'node_manager', 'object_manager', 'dashboard_agent_listen', 'dashboard_agent_grpc', 'metrics_export', 'runtime_env_agent']

const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? '' : 's'}`

/** Every port a Ray node reported, as [name, port(s)]: the known ones first, the rest by name. */
function rayPorts(ports: NodeRay['ports']): [string, string][] {
  const entries = Object.entries(ports ?? {}).filter(([, port]) => typeof port === 'number')
  const known = (name: string) => (RAY_PORTS.includes(name) ? RAY_PORTS.indexOf(name) : RAY_PORTS.length)
  const listed: [string, string][] = entries
    .filter(([name]) => name !== 'min_worker' && name !== 'max_worker')
    .sort(([a], [b]) => known(a) - known(b) || a.localeCompare(b))
    .map(([name, port]) => [name, String(port)])
  const { min_worker: low, max_worker: high } = ports ?? {}
  if (low != null || high != null) listed.push(['workers', low != null && high != null ? `${low}–${high}` : String(low ?? high)])
  return listed
}

/** "Ray head · GCS 10.0.0.1:6379 · dashboard :8265 · 4 CPUs, 0 GPUs, object store 1.2 GB". */
function raySummary(ray: NodeRay): string {
  const parts = [ray.head === true ? 'Ray head' : ray.head === false ? 'Ray worker' : 'Ray node']
  if (ray.gcs) parts.push(`GCS ${ray.gcs}`)
  const dashboard = ray.dashboard_port ?? (ray.head ? ray.ports?.dashboard : undefined)
  if (dashboard != null) parts.push(`dashboard :${dashboard}`)
  const resources = [
    ray.num_cpus != null && plural(ray.num_cpus, 'CPU'),
    ray.num_gpus != null && plural(ray.num_gpus, 'GPU'),
    ray.object_store_bytes != null && `object store ${formatBytes(ray.object_store_bytes)}`,
  ].filter((part): part is string => typeof part === 'string')
  if (resources.length) parts.push(resources.join(', '))
  return parts.join(' · ')
}

/** A Ray node's line (its role, the GCS, the dashboard, its resources) and, folded, every port it took. */
function RayFacts({ ray, nodeRank }: { ray: NodeRay; nodeRank: number }) {
  const ports = rayPorts(ray.ports)
  const portsText = ports.map(([name, port]) => `${name} ${port}`).join(', ')
  return (
    <div className="node-ray small">
      <div className="node-ray-summary" title={portsText ? `Ray ports: ${portsText}` : undefined}>
        {raySummary(ray)}
      </div>
      {ports.length > 0 && (
        <details className="node-ray-ports">
          <summary className="muted">Ray ports</summary>
          <ul className="mono" aria-label={`Ray ports of node ${nodeRank}`}>
            {ports.map(([name, port]) => (
              <li key={name}>
                <span className="muted">{name}</span> {port}
              </li>
            ))}
          </ul>
          {ray.temp_dir && <div className="muted mono" title="Ray's temp dir (session logs) on the machine">{ray.temp_dir}</div>}
        </details>
      )}
    </div>
  )
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
            {node.progress?.ray && <RayFacts ray={node.progress.ray} nodeRank={node.node_rank} />}
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
