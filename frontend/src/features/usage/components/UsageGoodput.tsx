import { QueryError } from '../../../components/QueryError'
import type { UsageGroup } from '../../../lib/types'
import { USAGE_WINDOWS, type UsageWindow } from '../api/get-usage'
import { useGoodputRollup } from '../api/get-goodput-rollup'
import { GoodputTable } from './GoodputTable'

/** Goodput by the page's grouping, over the jobs that ended in its window and the live ones. */
export function UsageGoodput({ by, period }: { by: UsageGroup; period: UsageWindow }) {
  const rollup = useGoodputRollup(by, period)
  const data = rollup.data
  return (
    <section className="panel usage-goodput" aria-labelledby="goodput-title">
      <header className="panel-header">
        <h2 id="goodput-title">Goodput</h2>
        <span className="muted small">
          jobs that ended in {USAGE_WINDOWS[period].span} and those still running, each counted whole
          {by === 'machine' ? ', without their waits for machines' : ''}
        </span>
        <div className="spacer" />
        {rollup.isFetching && rollup.isPlaceholderData && <span className="muted small">updating…</span>}
      </header>
      {rollup.isPending && <p className="muted">Loading…</p>}
      {rollup.isError && (
        <QueryError error={rollup.error} what="goodput" onRetry={() => void rollup.refetch()} retrying={rollup.isFetching} />
      )}
      {data && data.rows.length === 0 && <p className="empty usage-empty">No job ran in {USAGE_WINDOWS[period].span}.</p>}
      {data && data.rows.length > 0 && <GoodputTable rows={data.rows} overall={data.overall} by={by} />}
    </section>
  )
}
