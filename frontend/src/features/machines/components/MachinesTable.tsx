import { RelativeTime } from '../../../components/RelativeTime'
import { StatusBadge } from '../../../components/StatusBadge'
import { UsageBar } from '../../../components/UsageBar'
import { formatGiB } from '../../../lib/format'
import type { Machine } from '../../../lib/types'
import { useDeleteMachine } from '../api/delete-machine'

function gpuSummary(machine: Machine): string {
  const { gpu_count, gpus } = machine.capabilities
  if (!gpu_count) return '0'
  const names = [...new Set((gpus ?? []).map((g) => g.name))]
  return names.length ? `${gpu_count} × ${names.join(', ')}` : String(gpu_count)
}

function count(n: number, one: string, many: string): string {
  return `${n} ${n === 1 ? one : many}`
}

/** Who holds the machine: every project's GPUs and processes (everyone sees this, not the jobs). */
function usageSummary(machine: Machine): string {
  if (!machine.usage?.length) return '—'
  return machine.usage
    .map((u) => `${u.project}: ${u.gpus ? `${count(u.gpus, 'GPU', 'GPUs')}, ` : ''}${count(u.processes, 'process', 'processes')}`)
    .join('; ')
}

export function MachinesTable({ machines }: { machines: Machine[] }) {
  const remove = useDeleteMachine()

  const onDelete = (machine: Machine) => {
    if (window.confirm(`Remove machine "${machine.name}"? Its agent will no longer be accepted.`)) {
      remove.mutate(machine.id)
    }
  }

  if (machines.length === 0) {
    return <p className="empty">No machines yet. Add one and start its agent.</p>
  }

  return (
    <>
      {remove.isError && (
        <div className="inline-error" role="alert">
          Could not remove the machine: {remove.error.message}
        </div>
      )}
      <table className="table">
        <thead>
          <tr>
            <th>Name</th>
            <th>Address</th>
            <th>Status</th>
            <th className="num">CPUs</th>
            <th className="num">Mem GB</th>
            <th>GPUs</th>
            <th>In use</th>
            <th>CPU</th>
            <th>Mem</th>
            <th>Heartbeat</th>
            <th aria-label="Actions" />
          </tr>
        </thead>
        <tbody>
          {machines.map((m) => (
            <tr key={m.id}>
              <td className="strong">{m.name}</td>
              {/* The address the other nodes reach it at; agents listen on no port of their own. */}
              <td className="mono">{m.host}</td>
              <td>
                <StatusBadge status={m.status} />
              </td>
              <td className="num">{m.capabilities.cpu_count ?? '—'}</td>
              <td className="num">{formatGiB(m.capabilities.memory)}</td>
              <td>{gpuSummary(m)}</td>
              <td>{usageSummary(m)}</td>
              <td>
                <UsageBar percent={m.current_load.cpu_usage} label="CPU" />
              </td>
              <td>
                <UsageBar percent={m.current_load.memory_usage} label="Memory" />
              </td>
              <td className="muted">
                <RelativeTime iso={m.last_heartbeat} />
              </td>
              <td className="actions">
                <button
                  type="button"
                  className="danger small"
                  onClick={() => onDelete(m)}
                  disabled={remove.isPending && remove.variables === m.id}
                >
                  Delete
                </button>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </>
  )
}
