import { GoodputBar } from '../../../components/GoodputBar'
import { formatDuration } from '../../../lib/format'
import { formatShare } from '../../../lib/goodput'
import type { GoodputRollupRow, UsageGroup } from '../../../lib/types'
import { formatHours } from '../usage-series'

const HEADING: Record<UsageGroup, string> = { project: 'Project', user: 'User', machine: 'Machine' }

/** A cost to the cent; '—' where no machine the time ran on has a price. */
const formatCost = (cost: number | null | undefined) =>
  cost == null ? '—' : cost.toLocaleString('en-US', { minimumFractionDigits: 2, maximumFractionDigits: 2 })

/**
 * Goodput per key (most wall time first, the server's order): training over wall time, where the
 * rest went, the GPU-hours held and how many trained, and what they cost at the machines' prices,
 * the part not spent training too. The last row is every counted job once.
 */
export function GoodputTable({ rows, overall, by }: { rows: GoodputRollupRow[]; overall: GoodputRollupRow; by: UsageGroup }) {
  const line = (r: GoodputRollupRow, total = false) => (
    <tr key={total ? ' all' : r.key} data-key={total ? undefined : r.key} className={total ? 'goodput-total' : undefined}>
      <td className="strong">{total ? 'All' : r.key}</td>
      <td className="num strong">{formatShare(r.goodput)}</td>
      <td className="goodput-cell">
        <GoodputBar parts={r.parts} label={total ? 'All' : r.key} />
      </td>
      <td className="num" title={`${r.jobs} job${r.jobs === 1 ? '' : 's'}`}>
        {formatDuration(r.wall_seconds)}
      </td>
      <td className="num">{formatHours(r.gpu_hours)}</td>
      <td className="num">{formatHours(r.productive_gpu_hours)}</td>
      <td className="num">{formatCost(r.cost)}</td>
      <td className="num">{formatCost(r.wasted_cost)}</td>
    </tr>
  )
  return (
    <table className="table goodput-table" aria-label="Goodput">
      <thead>
        <tr>
          <th>{HEADING[by]}</th>
          <th className="num" title="training time over wall time">
            Goodput
          </th>
          <th>Where the time went</th>
          <th className="num" title="the jobs' wall time, from submission to end (or now)">
            Wall time
          </th>
          <th className="num">GPU-hours</th>
          <th className="num" title="GPU-hours spent training">
            Training GPU-hours
          </th>
          <th className="num" title="the nodes' time at their machines' prices">
            Cost
          </th>
          <th className="num" title="the cost of the time not spent training">
            Not training
          </th>
        </tr>
      </thead>
      <tbody>{rows.map((r) => line(r))}</tbody>
      {rows.length > 1 && <tfoot>{line(overall, true)}</tfoot>}
    </table>
  )
}
