import { memo, useLayoutEffect, useMemo, useRef, useState } from 'react'
import { formatClock } from '../../../lib/format'
import type { LogEvent } from '../../../lib/types'
import { LOG_LINE_CAP } from '../api/job-events'

/** Lines from the bottom within which we count as "at the bottom" (following). */
const FOLLOW_SLACK_PX = 24

function logPrefix(event: LogEvent): string {
  if (event.rank != null) return `[rank ${event.rank}]`
  if (event.node_rank != null) return `[node ${event.node_rank}]`
  return '[job]'
}

// Memoised: a new batch re-renders only the new lines, not the thousands already shown.
const LogLine = memo(function LogLine({ event }: { event: LogEvent }) {
  return (
    <div className={event.stream === 'stderr' ? 'log-line log-stderr' : 'log-line'}>
      <span className="log-ts">{formatClock(event.ts)}</span>
      <span className="log-prefix">{logPrefix(event)}</span> {event.line}
    </div>
  )
})

/**
 * All ranks' output, oldest first. Follows the tail until the user scrolls up, then holds still
 * until they jump back down.
 */
export function LogViewer({ logs }: { logs: LogEvent[] }) {
  const [rank, setRank] = useState<'all' | number>('all')
  const [follow, setFollow] = useState(true)
  const box = useRef<HTMLDivElement>(null)

  const ranks = useMemo(() => {
    const seen = new Set<number>()
    for (const e of logs) if (e.rank != null) seen.add(e.rank)
    return [...seen].sort((a, b) => a - b)
  }, [logs])
  const visible = useMemo(() => (rank === 'all' ? logs : logs.filter((e) => e.rank === rank)), [logs, rank])

  useLayoutEffect(() => {
    const el = box.current
    if (follow && el) el.scrollTop = el.scrollHeight
  }, [visible, follow])

  const onScroll = () => {
    const el = box.current
    if (!el) return
    const atBottom = el.scrollHeight - el.scrollTop - el.clientHeight <= FOLLOW_SLACK_PX
    if (atBottom !== follow) setFollow(atBottom)
  }

  return (
    <section className="panel logs" aria-label="Logs">
      <header className="panel-header">
        <h2>Logs</h2>
        <span className="muted small">
          {visible.length.toLocaleString('en-US')} lines{logs.length >= LOG_LINE_CAP ? ` (last ${LOG_LINE_CAP})` : ''}
        </span>
        <div className="spacer" />
        <label className="inline-label">
          Rank{' '}
          <select
            aria-label="Filter by rank"
            value={rank === 'all' ? 'all' : String(rank)}
            onChange={(e) => setRank(e.target.value === 'all' ? 'all' : Number(e.target.value))}
          >
            <option value="all">all</option>
            {ranks.map((r) => (
              <option key={r} value={r}>
                {r}
              </option>
            ))}
          </select>
        </label>
        {!follow && (
          <button type="button" className="small" onClick={() => setFollow(true)}>
            Follow ↓
          </button>
        )}
      </header>
      <div className="log-box" ref={box} onScroll={onScroll} data-testid="log-box">
        {visible.length === 0 ? (
          <div className="muted">Waiting for output…</div>
        ) : (
          visible.map((e) => <LogLine key={e.id} event={e} />)
        )}
      </div>
    </section>
  )
}
