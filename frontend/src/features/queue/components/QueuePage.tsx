import { QueryError } from '../../../components/QueryError'
import { useQueue } from '../api/get-queue'
import '../queue.css'
import { QueueTable } from './QueueTable'

function Empty({ total }: { total: number }) {
  if (total > 0) {
    return (
      <p className="empty">
        None of your projects' jobs wait; {total} {total === 1 ? 'job' : 'jobs'} of other projects {total === 1 ? 'does' : 'do'}.
      </p>
    )
  }
  return <p className="empty">Nothing is waiting: every job submitted is running or done.</p>
}

/**
 * The cluster's one queue, as far as you may see it: first in line first, each job with its place
 * in the whole queue and why it waits; live over the cluster stream.
 */
export function QueuePage() {
  const queue = useQueue()
  const data = queue.data
  return (
    <section className="panel" aria-labelledby="queue-title">
      <header className="panel-header">
        <h2 id="queue-title">Queue</h2>
        {data && (
          <span className="muted" data-testid="queue-count">
            {data.jobs.length}
            {data.total > data.jobs.length ? ` of ${data.total} in the whole queue` : ''}
          </span>
        )}
        <div className="spacer" />
        <span className="muted small">
          priority first, then submission order; a smaller job may start ahead (backfill) only if it cannot delay the head
        </span>
      </header>
      {queue.isPending && <p className="muted">Loading…</p>}
      {queue.isError && <QueryError error={queue.error} what="the queue" onRetry={() => void queue.refetch()} retrying={queue.isFetching} />}
      {data && (data.jobs.length ? <QueueTable entries={data.jobs} /> : <Empty total={data.total} />)}
    </section>
  )
}
