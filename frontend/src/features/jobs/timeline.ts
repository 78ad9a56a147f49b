import { PREEMPTED, PREEMPTING, type StalledEvent, type StateEvent } from '../../lib/types'

export type TimelineKind = 'job' | 'node' | 'recovery' | 'failure' | 'stall' | 'done' | 'preemption'

export interface TimelineEntry {
  id: number
  ts: string
  attempt: number
  /** "job" or "node 1". */
  subject: string
  /** "running → recovering", or for a stall what stalled. */
  change: string
  reason: string
  kind: TimelineKind
}

const FAILED = new Set(['failed', 'lost'])

function kindOf(e: StateEvent): TimelineKind {
  // Compared as strings: a status the schema does not name yet (preempted) is still a status.
  const status: string = e.status
  if (e.scope === 'job' && (status === PREEMPTING || status === PREEMPTED)) return 'preemption'
  if (e.status === 'recovering' || (e.scope === 'job' && e.previous === 'recovering')) return 'recovery'
  if (FAILED.has(e.status)) return 'failure'
  if (e.scope === 'job' && e.status === 'completed') return 'done'
  return e.scope === 'job' ? 'job' : 'node'
}

/**
 * Every job and node transition and every stall report, oldest first, each with its reason;
 * recoveries, failures and stalls are kinds of their own so the page can make them stand out.
 */
export function timelineEntries(states: StateEvent[], stalls: StalledEvent[]): TimelineEntry[] {
  const entries: TimelineEntry[] = states.map((e) => ({
    id: e.id,
    ts: e.ts,
    attempt: e.attempt ?? 0,
    subject: e.scope === 'job' ? 'job' : `node ${e.node_rank ?? '?'}`,
    change: `${e.previous || '—'} → ${e.status || '?'}`,
    reason: e.reason,
    kind: kindOf(e),
  }))
  for (const s of stalls) {
    entries.push({
      id: s.id,
      ts: s.ts,
      attempt: s.attempt ?? 0,
      subject: `rank ${s.rank ?? '?'}`,
      change: s.silent ? 'hung without a word' : `stalled at step ${s.step}`,
      reason: `${stallWhat(s)} on ${s.hostname} (process ${s.process_state}${whereItWaits(s)})${s.on_stall === 'recover' ? '; on_stall: recover ended its node' : ''}`,
      kind: 'stall',
    })
  }
  return entries.sort((a, b) => a.id - b.id)
}

/** What a stall is: a step that stopped advancing, or (no steps reported) nothing at all for a while. */
export function stallWhat(s: StalledEvent): string {
  return s.silent
    ? `nothing printed or reported, no CPU used, every thread waiting for ${s.stalled_for} s`
    : `no new step for ${s.stalled_for} s`
}

function whereItWaits(s: StalledEvent): string {
  if (s.waits_in) return '; waits in a collective'
  return s.waits_in === '' ? '; outside any collective' : ''
}
