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
 * Older pages in front of the window: only the lines older than the window's first (a page
 * fetched before the window moved may overlap it), so no line shows twice.
 */
export function joinOlder(older: LogEvent[], window: LogEvent[]): LogEvent[] {
  if (older.length === 0) return window
  const first = window[0]?.id ?? Infinity
  const kept = older.at(-1)!.id < first ? older : older.filter((e) => e.id < first)
  return kept.length ? [...kept, ...window] : window
}
