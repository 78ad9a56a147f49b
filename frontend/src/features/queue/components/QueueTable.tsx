import { useEffect, useState } from 'react'
import { Link } from 'react-router-dom'
import { RelativeTime } from '../../../components/RelativeTime'
import type { QueueEntry } from '../../../lib/types'
import { PriorityControl } from '../../jobs/components/PriorityControl'
import { asksText, expectedStartText } from '../queue-wording'

function ExpectedStart({ iso }: { iso: string }) {
  const [now, setNow] = useState(() => Date.now())
  useEffect(() => {
    const timer = setInterval(() => setNow(Date.now()), 15_000)
    return () => clearInterval(timer)
  }, [])
  return <div className="queue-eta">{expectedStartText(iso, now)}</div>
}

function Tags({ entry }: { entry: QueueEntry }) {
  const preempted = entry.status === 'preempted'
  if (entry.blocked_by !== null && !entry.head && !entry.backfill && !entry.borrowing && !preempted) return null
  return (
    <span className="queue-tags">
      {preempted && (
        <span className="tag tag-preempted" title="it yielded to a higher-priority job and resumes from its checkpoint">
          preempted
        </span>
      )}
      {entry.blocked_by === null && (
        <span className="tag tag-starting" title="the next queue pass starts it">
          starting
        </span>
      )}
      {entry.head && (
        <span className="tag tag-head" title="the first in line that cannot start: a job behind it starts first only if it cannot delay it">
          head
        </span>
      )}
      {entry.backfill && (
        <span className="tag tag-backfill" title="starts ahead of the head, which it cannot delay">
          backfill
        </span>
      )}
      {entry.borrowing && (
        <span className="tag tag-borrowing" title="past its project's quota: it may only borrow idle capacity, and is the first to give it back">
          borrowing
        </span>
      )}
    </span>
  )
}

/** The queued jobs in queue order: place, priority, who and what, since when, and why each waits. */
export function QueueTable({ entries }: { entries: QueueEntry[] }) {
  return (
    <table className="table queue-table" aria-label="Queued jobs">
      <thead>
        <tr>
          <th className="num" title="place in the whole queue, every project's jobs counted">
            #
          </th>
          <th>Job</th>
          <th>Priority</th>
          <th>Project</th>
          <th>Owner</th>
          <th>Asks</th>
          <th>Waiting since</th>
          <th>Why it waits</th>
        </tr>
      </thead>
      <tbody>
        {entries.map((entry) => (
          <tr key={entry.id} data-job-id={entry.id} className={entry.head ? 'queue-head' : undefined}>
            <td className="num strong">{entry.position}</td>
            <td>
              <Link to={`/jobs/${entry.id}`} className="strong">
                {entry.name}
              </Link>{' '}
              <span className="muted mono">#{entry.id}</span>
            </td>
            <td>
              <PriorityControl job={entry} />
            </td>
            <td className="muted">{entry.project}</td>
            <td className="muted">{entry.owner}</td>
            <td>{asksText(entry)}</td>
            <td className="muted">
              <RelativeTime iso={entry.waiting_since} intervalMs={15_000} />
            </td>
            <td className="queue-reason">
              <Tags entry={entry} />
              <span className={entry.blocked_by === 'invalid' ? 'text-bad' : undefined}>{entry.reason}</span>
              {/* Unknown, the server's reason says so itself. */}
              {entry.head && entry.expected_start && <ExpectedStart iso={entry.expected_start} />}
            </td>
          </tr>
        ))}
      </tbody>
    </table>
  )
}
