import type { PlanRefusal } from '../../lib/types'

/** What kind of refusal this is, so the guidance fits (jobs/placement/planner.py PlanError kinds). */
export function refusalKind(refusal: PlanRefusal, picked: string[]): 'unavailable' | 'busy' | 'insufficient' {
  if (refusal.detail.startsWith('unknown machines')) return 'unavailable'
  const down = /^(offline|draining|pending|suspect|quarantined)/
  if (refusal.skipped.some((s) => picked.includes(s.machine_name) && down.test(s.reason))) return 'unavailable'
  if (refusal.detail.startsWith('waiting for')) return 'busy'
  return 'insufficient'
}
