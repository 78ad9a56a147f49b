import type { ExecutionPlan, PlanRefusal, PlanSkipped } from '../../../lib/types'
import { useSuggestMachines } from '../api/suggest-machines'
import { freeGpus } from '../new-job-spec'
import { refusalKind } from '../plan-refusal'

const plural = (n: number, word: string, words = `${word}s`) => `${n} ${n === 1 ? word : words}`

const rankRange = (start: number, end: number) => (start === end ? `rank ${start}` : `ranks ${start}–${end}`)

/** The user's hyperparameters next to what every rank gets (sdk/scaling.py's adjustments). */
function Hyperparameters({ asked, adjusted }: { asked: Record<string, unknown>; adjusted: Record<string, unknown> }) {
  const shown = Object.keys(adjusted).filter((key) => key !== 'rank' && key !== 'world_size' && adjusted[key] !== null)
  if (!shown.length) return <p className="muted">No hyperparameters to adjust (batch size and learning rate unset).</p>
  return (
    <table className="plan-table" aria-label="Hyperparameters">
      <thead>
        <tr>
          <th>Hyperparameter</th>
          <th>Asked</th>
          <th>Each rank gets</th>
        </tr>
      </thead>
      <tbody>
        {shown.map((key) => (
          <tr key={key}>
            <td>{key}</td>
            <td>{key in asked ? String(asked[key]) : '—'}</td>
            <td>{String(adjusted[key])}</td>
          </tr>
        ))}
      </tbody>
    </table>
  )
}

function SkippedMachines({ skipped }: { skipped: PlanSkipped[] }) {
  if (!skipped.length) return null
  return (
    <div>
      <h4>Not used</h4>
      <ul className="plan-skipped" aria-label="Skipped machines">
        {skipped.map((s) => (
          <li key={s.machine_id}>
            <strong>{s.machine_name}</strong>: {s.reason}
          </li>
        ))}
      </ul>
    </div>
  )
}

interface PlanViewProps {
  plan: ExecutionPlan
  /** The spec's own hyperparameters, to show beside the adjusted ones. */
  asked: Record<string, unknown>
  /** The form changed since this plan was made: launching it would not launch what is shown. */
  stale: boolean
  launching: boolean
  onLaunch: () => void
}

/** The execution plan of POST /api/jobs/plan: what Launch will start, machine by machine. */
export function PlanView({ plan, asked, stale, launching, onLaunch }: PlanViewProps) {
  const ray = plan.launcher === 'ray'
  return (
    <section className="plan-view" aria-label="Execution plan">
      <h3>Execution plan</h3>
      <p>
        {plural(plan.world_size, 'process', 'processes')} on {plural(plan.nnodes, 'machine')} ({plan.procs_per_node} per machine),
        {plan.nodes_range && ` elastic: ${plan.nodes_range[0]} to ${plan.nodes_range[1]} machines (starts with ${plan.nnodes}),`}{' '}
        backend <strong>{plan.backend}</strong>, master <strong>{`${plan.master_addr}:${plan.master_port}`}</strong>
      </p>
      {ray && (
        <p className="plan-ray">
          Ray: node 0 runs the Ray head, its GCS on <strong>{`${plan.master_addr}:${plan.master_port}`}</strong>, and every
          other node joins it. Each node's other Ray ports (dashboard, raylet, object manager, worker range) are chosen free
          on its machine at launch and shown on its node card.
        </p>
      )}
      <table className="plan-table" aria-label="Nodes">
        <thead>
          <tr>
            <th>Node</th>
            <th>Machine</th>
            <th>Ranks</th>
            <th>GPUs</th>
          </tr>
        </thead>
        <tbody>
          {plan.nodes.map((node) => (
            <tr key={node.node_rank}>
              <td>
                {node.node_rank}
                {node.node_rank === 0 && <span className="badge plan-master">{ray ? 'Ray head' : 'master'}</span>}
              </td>
              <td>
                {node.machine_name} <span className="muted">{node.host}</span>
              </td>
              <td>{rankRange(node.rank_start, node.rank_end)}</td>
              <td>{node.gpus.length ? node.gpus.join(', ') : '—'}</td>
            </tr>
          ))}
          {(plan.spares ?? []).map((spare) => (
            <tr key={`spare-${spare.machine_id}`} className="plan-spare">
              <td>
                <span className="badge">hot spare</span>
              </td>
              <td>
                {spare.machine_name} <span className="muted">{spare.host}</span>
              </td>
              <td className="muted">takes a lost node's ranks</td>
              <td>{spare.gpus.length ? spare.gpus.join(', ') : '—'}</td>
            </tr>
          ))}
        </tbody>
      </table>
      <Hyperparameters asked={asked} adjusted={plan.hyperparameters} />
      <SkippedMachines skipped={plan.skipped ?? []} />
      {plan.preflight && (
        <div>
          <h4>Preflight</h4>
          <p>Before any rank starts, every node checks it reaches {plan.preflight.master} and that the versions agree:</p>
          <ul aria-label="Preflight versions">
            {Object.entries(plan.preflight.versions).map(([machine, versions]) => (
              <li key={machine}>
                <strong>{machine}</strong>: {versions}
              </li>
            ))}
          </ul>
        </div>
      )}
      {plan.warnings.length > 0 && (
        <ul className="plan-warnings" aria-label="Warnings">
          {plan.warnings.map((w) => (
            <li key={w}>{w}</li>
          ))}
        </ul>
      )}
      {stale ? (
        <p className="form-error">The form changed since this plan: plan again before launching.</p>
      ) : (
        <div className="form-actions">
          <button type="button" className="primary" disabled={launching} onClick={onLaunch}>
            {launching ? 'Launching…' : 'Launch'}
          </button>
        </div>
      )}
    </section>
  )
}

const HEADINGS = {
  unavailable: 'Machine unavailable',
  busy: 'Machines busy',
  insufficient: 'Not enough resources',
} as const

interface PlanRefusalViewProps {
  refusal: PlanRefusal
  /** The manually picked machines (empty with automatic selection). */
  picked: string[]
  nodes: number
  gpusPerNode: number
  /** Pick these machines instead (and as many nodes as there are). */
  onUseMachines: (names: string[]) => void
  onLowerNodes: (nodes: number) => void
  /** A busy cluster still takes the job: it waits in the queue. */
  onLaunchAnyway: () => void
  launching: boolean
}

/** Why the job cannot be placed now, machine by machine, and what would let it. */
export function PlanRefusalView(props: PlanRefusalViewProps) {
  const { refusal, picked, nodes, gpusPerNode, onUseMachines, onLowerNodes, onLaunchAnyway, launching } = props
  const kind = refusalKind(refusal, picked)
  const suggestions = useSuggestMachines(nodes, gpusPerNode, kind !== 'busy')
  const fitting = suggestions.data?.machines ?? []
  const suggested = fitting.filter((m) => suggestions.data?.suggested.includes(m.id))
  return (
    <section className="plan-view plan-refused" aria-label="Plan refused">
      <h3>{HEADINGS[kind]}</h3>
      <p role="alert">{refusal.detail}</p>
      <SkippedMachines skipped={refusal.skipped} />
      {kind === 'busy' && (
        <div className="form-actions">
          <p className="form-hint">Launching queues the job until enough machines are free.</p>
          <button type="button" disabled={launching} onClick={onLaunchAnyway}>
            {launching ? 'Launching…' : 'Launch anyway (queue)'}
          </button>
        </div>
      )}
      {kind !== 'busy' && suggestions.data && (
        <div className="plan-suggestions">
          {suggestions.data.enough ? (
            <>
              <p>
                {kind === 'unavailable' ? 'These machines are online and fit' : 'These machines fit'}:{' '}
                {suggested.map((m) => `${m.name} (${plural(freeGpus(m), 'free GPU')})`).join(', ')}
              </p>
              <button type="button" onClick={() => onUseMachines(suggested.map((m) => m.name))}>
                Use these machines
              </button>
            </>
          ) : fitting.length > 0 ? (
            <>
              <p>
                Only {plural(fitting.length, 'machine')}
                {gpusPerNode > 0 && ` with ${plural(gpusPerNode, 'free GPU')}`} {fitting.length === 1 ? 'is' : 'are'} online ({fitting.map((m) => m.name).join(', ')}); {nodes} asked. Use fewer machines, fewer GPUs per machine,
                or bring more machines online.
              </p>
              <button type="button" onClick={() => onLowerNodes(fitting.length)}>
                Use {plural(fitting.length, 'machine')}
              </button>
            </>
          ) : (
            <p>
              No online machine has {plural(gpusPerNode, 'free GPU')}: lower the GPUs per machine or bring a machine online.
            </p>
          )}
        </div>
      )}
    </section>
  )
}
