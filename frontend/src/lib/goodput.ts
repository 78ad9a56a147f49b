import { formatDuration } from './format'
import type { GoodputCategory, GoodputParts } from './types'

interface CategoryLook {
  label: string
  /** What it counts, as the server's reports/goodput.py defines it. */
  hint: string
}

// Every category the server splits wall time into, once, in its order (a category the server adds
// or drops fails to compile here). Training first in meaning, but shown where it falls in a job's life.
const CATEGORIES: Record<GoodputCategory, CategoryLook> = {
  queued: { label: 'Queued', hint: 'waiting in the queue to start' },
  preempted: { label: 'Preempted', hint: 'yielding to another job, then waiting to resume' },
  code_fetch: { label: 'Code fetch', hint: 'fetching and unpacking the code bundle' },
  environment_build: { label: 'Environment build', hint: "building the job's environment" },
  launch: { label: 'Launch', hint: "launch, preflight, rendezvous and the script's start" },
  training: { label: 'Training', hint: 'stepping: the productive time' },
  checkpoint: { label: 'Checkpoint', hint: 'saves holding the training loop' },
  recovery: { label: 'Recovery', hint: 'after a failure: stopping, backing off, re-planning, relaunching' },
  lost_work: { label: 'Lost work', hint: 'steps redone after resuming from an earlier checkpoint' },
  hang: { label: 'Hang', hint: 'from the last progress to a stall or lost node being detected' },
  idle: { label: 'Idle', hint: 'running without stepping' },
}

export const GOODPUT_CATEGORIES = Object.keys(CATEGORIES) as GoodputCategory[]

export const categoryLabel = (category: GoodputCategory) => CATEGORIES[category].label
export const categoryHint = (category: GoodputCategory) => CATEGORIES[category].hint

/** The categories that got any time, in the server's order, with their share of the whole. */
export function goodputShares(parts: GoodputParts): { category: GoodputCategory; seconds: number; share: number }[] {
  const wall = GOODPUT_CATEGORIES.reduce((sum, c) => sum + parts[c], 0)
  if (wall <= 0) return []
  return GOODPUT_CATEGORIES.filter((c) => parts[c] > 0).map((category) => ({
    category,
    seconds: parts[category],
    share: parts[category] / wall,
  }))
}

/** 0.2713 -> "27.1%". */
export const formatShare = (share: number) => `${(100 * share).toFixed(1)}%`

/** Seconds as the bars' tooltips and legends read them: under a minute to a tenth. */
export const formatSeconds = (seconds: number) =>
  seconds < 60 ? `${seconds < 10 ? seconds.toFixed(1) : Math.round(seconds)}s` : formatDuration(seconds)
