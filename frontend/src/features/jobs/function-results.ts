import type { FunctionResult } from '../../lib/types'

/**
 * The rank that caused a function job's failure: the earliest to raise (by its machine's clock)
 * among those whose error is their own, not "another rank went away". Ties go to the lower rank;
 * a failure with no time comes last. Null when no rank failed on its own.
 */
export function firstFailureRank(results: FunctionResult[]): number | null {
  const when = (r: FunctionResult) => (r.raised_at ? Date.parse(r.raised_at) : Number.POSITIVE_INFINITY)
  const causes = results.filter((r) => !r.ok && !r.peer_failure)
  if (!causes.length) return null
  return causes.reduce((first, r) => (when(r) < when(first) || (when(r) === when(first) && r.rank < first.rank) ? r : first)).rank
}
