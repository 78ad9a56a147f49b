import type { LogEvent } from '../../lib/types'

export type RankFilter = 'all' | number
export type StreamFilter = 'all' | 'stdout' | 'stderr'

/**
 * What "jump to first error" looks for: a traceback, an ...Error / exception, a fatal message. A
 * word ending in "error" ("RuntimeError", "error:") is matched without a leading \w*, which made
 * every scan of a long log backtrack over each word.
 */
export const ERROR_PATTERN = /traceback \(most recent call last\)|error\b|\bexception\b|\bfatal\b/i

/** Distinct colours for ranks; rank n takes colour n mod this. */
export const RANK_COLOURS = 8

export function logPrefix(event: LogEvent): string {
  if (event.rank != null) return `[rank ${event.rank}]`
  if (event.node_rank != null) return `[node ${event.node_rank}]`
  return '[job]'
}

export function rankColourClass(event: LogEvent): string {
  return event.rank == null ? 'log-rank-none' : `log-rank-${event.rank % RANK_COLOURS}`
}

export function filterLines(lines: LogEvent[], rank: RankFilter, stream: StreamFilter): LogEvent[] {
  if (rank === 'all' && stream === 'all') return lines
  return lines.filter((e) => (rank === 'all' || e.rank === rank) && (stream === 'all' || e.stream === stream))
}

/** Indexes of the lines containing `query` (case-insensitive); none for an empty query. */
export function findMatches(lines: LogEvent[], query: string): number[] {
  const needle = query.trim().toLowerCase()
  if (!needle) return []
  const out: number[] = []
  lines.forEach((e, i) => {
    if (e.line.toLowerCase().includes(needle)) out.push(i)
  })
  return out
}

export function firstErrorIndex(lines: LogEvent[]): number {
  return lines.findIndex((e) => ERROR_PATTERN.test(e.line))
}

/** Every rank seen, ascending. */
export function ranksOf(lines: LogEvent[]): number[] {
  const seen = new Set<number>()
  for (const e of lines) if (e.rank != null) seen.add(e.rank)
  return [...seen].sort((a, b) => a - b)
}

/**
 * Older pages and the window as one log in id order, each line once. Pages are contiguous (every
 * line below where they began); the window may hold some of their lines too: a stream that opened
 * on each rank's tail sent a quiet rank's last lines from further back than a busy rank's.
 */
export function joinOlder(older: LogEvent[], window: LogEvent[]): LogEvent[] {
  if (older.length === 0) return window
  const first = window[0]?.id ?? Infinity
  if (older.at(-1)!.id < first) return [...older, ...window]
  const joined: LogEvent[] = []
  let i = 0
  let j = 0
  while (i < older.length || j < window.length) {
    const a = older[i]
    const b = window[j]
    if (b === undefined || (a !== undefined && a.id < b.id)) {
      joined.push(a)
      i += 1
    } else {
      if (a !== undefined && a.id === b.id) i += 1
      joined.push(b)
      j += 1
    }
  }
  return joined
}
