import { priorityLabel, priorityTone } from '../lib/priority'

/** A job's priority as a badge: "high", "low" or the number, coloured above or below normal. */
export function PriorityBadge({ priority }: { priority: number }) {
  return (
    <span className={`prio prio-${priorityTone(priority)}`} title={`priority ${priority} (higher first in the queue)`}>
      {priorityLabel(priority)}
    </span>
  )
}
