import { useLayoutEffect, useMemo, useRef } from 'react'
import { formatClock } from '../../../lib/format'
import type { StalledEvent, StateEvent } from '../../../lib/types'
import { timelineEntries } from '../timeline'

const KIND_LABEL = {
  recovery: 'recovery',
  failure: 'failure',
  stall: 'stall',
  done: 'done',
  preemption: 'preemption',
  job: '',
  node: '',
} as const

/** The job's life: every transition of the job and its nodes with the reason, newest at the bottom. */
export function StateTimeline({ states, stalls }: { states: StateEvent[]; stalls: StalledEvent[] }) {
  const entries = useMemo(() => timelineEntries(states, stalls), [states, stalls])
  const box = useRef<HTMLOListElement>(null)
  const recoveries = entries.filter((e) => e.kind === 'recovery' && e.subject === 'job' && e.change.endsWith('recovering')).length
  // Asked to yield (preempting), then back in the queue (preempted): one preemption.
  const preemptions = entries.filter((e) => e.kind === 'preemption' && e.subject === 'job' && e.change.endsWith('→ preempted')).length

  // Keeps the latest transition in view unless the user scrolled up to read older ones.
  useLayoutEffect(() => {
    const el = box.current
    if (el && el.scrollHeight - el.scrollTop - el.clientHeight < 60) el.scrollTop = el.scrollHeight
  }, [entries])

  return (
    <section className="panel timeline-panel" aria-label="Timeline">
      <header className="panel-header">
        <h2>Timeline</h2>
        <span className="muted small">
          {entries.length} events
          {recoveries ? `, ${recoveries} ${recoveries === 1 ? 'recovery' : 'recoveries'}` : ''}
          {preemptions ? `, ${preemptions} ${preemptions === 1 ? 'preemption' : 'preemptions'}` : ''}
          {stalls.length ? `, ${stalls.length} stall${stalls.length === 1 ? '' : 's'}` : ''}
        </span>
      </header>
      {entries.length === 0 ? (
        <p className="empty">No transitions yet.</p>
      ) : (
        <ol className="timeline" ref={box} tabIndex={0} aria-label="Transitions">
          {entries.map((e) => (
            <li key={e.id} className={`tl-entry tl-${e.kind}`}>
              <span className="tl-time mono">{formatClock(e.ts)}</span>
              <span className="tl-subject">
                {e.subject}
                {e.attempt ? <span className="muted"> · a{e.attempt}</span> : null}
              </span>
              <span className="tl-change">
                {e.change}
                {KIND_LABEL[e.kind] && <span className={`tl-tag tl-tag-${e.kind}`}>{KIND_LABEL[e.kind]}</span>}
              </span>
              {e.reason && (
                <span className="tl-reason" title={e.reason}>
                  {e.reason}
                </span>
              )}
            </li>
          ))}
        </ol>
      )}
    </section>
  )
}
