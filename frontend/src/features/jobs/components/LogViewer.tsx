import { useVirtualizer } from '@tanstack/react-virtual'
import { memo, useCallback, useLayoutEffect, useMemo, useRef, useState } from 'react'
import { formatClock } from '../../../lib/format'
import type { LogEvent } from '../../../lib/types'
import { fetchOlderLogs, OLDER_PAGE } from '../api/get-logs'
import {
  filterLines,
  findMatches,
  firstErrorIndex,
  joinOlder,
  logPrefix,
  rankColourClass,
  ranksOf,
  type RankFilter,
  type StreamFilter,
} from '../log-view'

/** Every line is one row of this height (long lines scroll sideways), so the list needs no measuring. */
export const LOG_ROW_PX = 18
/** Pixels from the bottom within which we count as "at the bottom" (following). */
const FOLLOW_SLACK_PX = 24
/** Scrolled this close to the top, the page of lines above is fetched. */
const PAGE_OLDER_PX = LOG_ROW_PX * 10
/** Older lines kept on top of the live window; past this the view stops paging further back. */
const OLDER_CAP = 50_000

function Highlighted({ text, query }: { text: string; query: string }) {
  const needle = query.trim().toLowerCase()
  if (!needle) return <>{text}</>
  const parts: React.ReactNode[] = []
  const lower = text.toLowerCase()
  let at = 0
  for (let i = lower.indexOf(needle); i !== -1; i = lower.indexOf(needle, at)) {
    if (i > at) parts.push(text.slice(at, i))
    parts.push(<mark key={i}>{text.slice(i, i + needle.length)}</mark>)
    at = i + needle.length
  }
  parts.push(text.slice(at))
  return <>{parts}</>
}

// Memoised: a new batch re-renders only the rows that moved, not every row on screen.
const LogLine = memo(function LogLine({
  event,
  top,
  query,
  current,
}: {
  event: LogEvent
  top: number
  query: string
  current: boolean
}) {
  const classes = ['log-line', rankColourClass(event)]
  if (event.stream === 'stderr') classes.push('log-stderr')
  if (current) classes.push('log-current')
  return (
    <div className={classes.join(' ')} style={{ transform: `translateY(${top}px)` }} data-id={event.id}>
      <span className="log-ts">{formatClock(event.ts)}</span>
      <span className="log-prefix">{logPrefix(event)}</span> <Highlighted text={event.line} query={query} />
    </div>
  )
})

/**
 * All ranks' output, oldest first, virtualised: only the rows on screen are in the DOM, so a job's
 * 200,000 lines scroll like 200. Follows the tail until the user scrolls up, then holds still; at
 * the top it pages the lines below `olderBefore` from the API (the stream opens on each rank's
 * latest lines, and the window in memory is LOG_LINE_CAP lines).
 */
export function LogViewer({ jobId, logs, olderBefore }: { jobId: number; logs: LogEvent[]; olderBefore: number | null }) {
  const [rank, setRank] = useState<RankFilter>('all')
  const [stream, setStream] = useState<StreamFilter>('all')
  const [query, setQuery] = useState('')
  // Which match the user stepped to; -1 until they step (Enter, the arrows).
  const [matchAt, setMatchAt] = useState(-1)
  const [focused, setFocused] = useState<number | null>(null)
  const [follow, setFollow] = useState(true)
  const [older, setOlder] = useState<LogEvent[]>([])
  const [paging, setPaging] = useState<'idle' | 'loading' | 'done' | 'failed'>('idle')
  const box = useRef<HTMLDivElement>(null)
  // The first line on screen before older lines were put above it: kept in view after they land.
  const anchor = useRef<{ id: number; offset: number } | null>(null)

  const all = useMemo(() => joinOlder(older, logs), [older, logs])
  const ranks = useMemo(() => ranksOf(all), [all])
  const visible = useMemo(() => filterLines(all, rank, stream), [all, rank, stream])
  const matches = useMemo(() => findMatches(visible, query), [visible, query])
  const errorAt = useMemo(() => firstErrorIndex(visible), [visible])
  const hasOlder = olderBefore !== null || older.length > 0
  const canPageOlder = hasOlder && paging === 'idle' && older.length < OLDER_CAP

  // TanStack Virtual hands out fresh functions each render: this component is left unmemoised.
  // eslint-disable-next-line react-hooks/incompatible-library
  const virtualizer = useVirtualizer({
    count: visible.length,
    getScrollElement: () => box.current,
    estimateSize: () => LOG_ROW_PX,
    overscan: 20,
    initialRect: { width: 800, height: 460 },
    getItemKey: (index) => visible[index].id,
  })

  const scrollToIndex = useCallback((index: number) => {
    const el = box.current
    if (!el) return
    setFollow(false)
    setFocused(index)
    el.scrollTop = Math.max(0, index * LOG_ROW_PX - el.clientHeight / 2)
  }, [])

  useLayoutEffect(() => {
    const el = box.current
    if (!el) return
    if (anchor.current) {
      const { id, offset } = anchor.current
      anchor.current = null
      const index = visible.findIndex((e) => e.id === id)
      if (index > 0) el.scrollTop = index * LOG_ROW_PX + offset
      return
    }
    // Past the end is clamped to the bottom by the browser.
    if (follow) el.scrollTop = visible.length * LOG_ROW_PX
  }, [visible, follow])

  const pageOlder = async () => {
    const el = box.current
    // Pages are contiguous: the next one ends where the last began, the first where history does.
    const before = older[0]?.id ?? olderBefore
    if (!el || before === null) return
    setPaging('loading')
    try {
      const page = await fetchOlderLogs(jobId, before)
      const top = visible[Math.floor(el.scrollTop / LOG_ROW_PX)]
      if (top) anchor.current = { id: top.id, offset: el.scrollTop % LOG_ROW_PX }
      setOlder((current) => [...page, ...current])
      setPaging(page.length < OLDER_PAGE ? 'done' : 'idle')
    } catch {
      setPaging('failed')
    }
  }

  const onScroll = () => {
    const el = box.current
    if (!el) return
    const atBottom = el.scrollHeight - el.scrollTop - el.clientHeight <= FOLLOW_SLACK_PX
    if (atBottom !== follow) setFollow(atBottom)
    if (el.scrollTop <= PAGE_OLDER_PX && canPageOlder) void pageOlder()
  }

  const goToMatch = (step: number) => {
    if (!matches.length) return
    const next = matchAt < 0 ? (step > 0 ? 0 : matches.length - 1) : (matchAt + step + matches.length) % matches.length
    setMatchAt(next)
    scrollToIndex(matches[next])
  }

  const current = matchAt >= 0 && matchAt < matches.length ? matches[matchAt] : focused

  return (
    <section className="panel logs" aria-label="Logs">
      <header className="panel-header log-toolbar">
        <h2>Logs</h2>
        <span className="muted small log-count" data-testid="log-count">
          {visible.length.toLocaleString('en-US')} lines
          {hasOlder ? ' (the latest; older ones load on scroll)' : ''}
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
        <label className="inline-label">
          Stream{' '}
          <select aria-label="Filter by stream" value={stream} onChange={(e) => setStream(e.target.value as StreamFilter)}>
            <option value="all">all</option>
            <option value="stdout">stdout</option>
            <option value="stderr">stderr</option>
          </select>
        </label>
        <input
          type="search"
          className="log-search"
          placeholder="Search logs"
          aria-label="Search logs"
          value={query}
          onChange={(e) => {
            setQuery(e.target.value)
            setMatchAt(-1)
          }}
          onKeyDown={(e) => {
            if (e.key === 'Enter') {
              e.preventDefault()
              goToMatch(e.shiftKey ? -1 : 1)
            }
          }}
        />
        <span className="muted small log-matches" aria-live="polite">
          {!query.trim()
            ? ''
            : !matches.length
              ? 'no match'
              : matchAt < 0 || matchAt >= matches.length
                ? `${matches.length} matches`
                : `${matchAt + 1} of ${matches.length}`}
        </span>
        <button type="button" className="small" onClick={() => goToMatch(-1)} disabled={!matches.length} aria-label="Previous match">
          ↑
        </button>
        <button type="button" className="small" onClick={() => goToMatch(1)} disabled={!matches.length} aria-label="Next match">
          ↓
        </button>
        <button type="button" className="small" onClick={() => scrollToIndex(errorAt)} disabled={errorAt < 0}>
          First error
        </button>
        <button
          type="button"
          className="small"
          onClick={() => {
            setFocused(null)
            setFollow(true)
          }}
          disabled={follow}
        >
          Follow ↓
        </button>
      </header>
      <div className="log-box" ref={box} onScroll={onScroll} data-testid="log-box" tabIndex={0} aria-label="Log lines">
        {visible.length === 0 ? (
          <div className="muted">{all.length ? 'No line matches the filters.' : 'Waiting for output…'}</div>
        ) : (
          <div className="log-rows" style={{ height: virtualizer.getTotalSize() }}>
            {paging === 'loading' && <div className="log-paging">Loading older lines…</div>}
            {paging === 'failed' && <div className="log-paging">Could not load older lines.</div>}
            {virtualizer.getVirtualItems().map((row) => (
              <LogLine
                key={row.key}
                event={visible[row.index]}
                top={row.start}
                query={query}
                current={row.index === current}
              />
            ))}
          </div>
        )}
      </div>
    </section>
  )
}
