import type { UsageGroup, UsageTotal } from '../../../lib/types'
import { formatHours } from '../usage-series'

const HEADING: Record<UsageGroup, string> = { project: 'Project', user: 'User', machine: 'Machine' }

const seconds = (s: number) => `${Math.round(s).toLocaleString('en-US')} s`

/** The window's totals per key, most GPU-hours first (the server's order), and their sum. */
export function UsageTable({ totals, by }: { totals: UsageTotal[]; by: UsageGroup }) {
  const sum = (pick: (t: UsageTotal) => number) => totals.reduce((acc, t) => acc + pick(t), 0)
  return (
    <table className="table usage-table" aria-label="Usage totals">
      <thead>
        <tr>
          <th>{HEADING[by]}</th>
          <th className="num">GPU-hours</th>
          <th className="num">Process-hours</th>
          <th className="num" title="nodes that ran in the window">
            Nodes
          </th>
        </tr>
      </thead>
      <tbody>
        {totals.map((t) => (
          <tr key={t.key} data-key={t.key}>
            <td className="strong">{t.key}</td>
            <td className="num" title={seconds(t.gpu_seconds)}>
              {formatHours(t.gpu_hours)}
            </td>
            <td className="num" title={seconds(t.process_seconds)}>
              {formatHours(t.process_hours)}
            </td>
            <td className="num">{t.nodes}</td>
          </tr>
        ))}
      </tbody>
      {totals.length > 1 && (
        <tfoot>
          <tr>
            <td className="strong">All</td>
            <td className="num strong">{formatHours(sum((t) => t.gpu_hours))}</td>
            <td className="num strong">{formatHours(sum((t) => t.process_hours))}</td>
            <td className="num strong">{sum((t) => t.nodes)}</td>
          </tr>
        </tfoot>
      )}
    </table>
  )
}
