import { formatDateTime, formatDuration } from '../../lib/format'
import type { QueueEntry } from '../../lib/types'

const plural = (n: number, one: string, many: string) => `${n} ${n === 1 ? one : many}`

/** "2 GPUs, 4 processes", or "4 processes" for a job that asks no GPU. */
export function asksText(entry: Pick<QueueEntry, 'gpus' | 'processes'>): string {
  const processes = plural(entry.processes, 'process', 'processes')
  return entry.gpus ? `${plural(entry.gpus, 'GPU', 'GPUs')}, ${processes}` : processes
}

/** The head's expected start in words: "in 12m 0s (Jun 1, 14:05)", "any moment now", or unknown. */
export function expectedStartText(iso: string | null, now: number): string {
  if (!iso) return 'start unknown: no running job has an ETA or a time limit to count on'
  const seconds = (Date.parse(iso) - now) / 1000
  if (Number.isNaN(seconds)) return 'start unknown'
  if (seconds <= 30) return 'expected to start any moment now'
  return `expected to start in ${formatDuration(seconds)} (${formatDateTime(iso)})`
}
