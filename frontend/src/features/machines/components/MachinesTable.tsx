import type { Machine } from '../../../lib/types'
import type { RoundTrip } from '../../../lib/machine-summary'
import { MachineRow } from './MachineRow'

interface MachinesTableProps {
  machines: Machine[]
  canManage: boolean
  roundTrips: Record<number, RoundTrip>
  checking: boolean
  onRoundTrip: (id: number, result: RoundTrip) => void
}

/**
 * Fixed column widths (table-layout: fixed, styles.css "Machines page"): the numbers the cluster
 * stream changes every few seconds never move the columns.
 */
export function MachinesTable({ machines, canManage, roundTrips, checking, onRoundTrip }: MachinesTableProps) {
  if (machines.length === 0) {
    return <p className="empty">No machines yet. Add one and start its agent.</p>
  }

  return (
    <table className="table machines-table">
      <colgroup>
        <col className="col-machine" />
        <col className="col-status" />
        <col className="col-capabilities" />
        <col className="col-load" />
        <col className="col-usage" />
        <col className="col-heartbeat" />
        <col className="col-rtt" />
        <col className={canManage ? 'col-actions' : 'col-actions-ping'} />
      </colgroup>
      <thead>
        <tr>
          <th>Machine</th>
          <th>Status</th>
          <th>Capabilities</th>
          <th>Load</th>
          <th>In use</th>
          <th className="num">Heartbeat</th>
          <th className="num">Round trip</th>
          <th aria-label="Actions" />
        </tr>
      </thead>
      <tbody>
        {machines.map((m) => (
          <MachineRow
            key={m.id}
            machine={m}
            canManage={canManage}
            roundTrip={roundTrips[m.id]}
            checking={checking}
            onRoundTrip={onRoundTrip}
          />
        ))}
      </tbody>
    </table>
  )
}
