import { PriorityBadge } from '../../../components/PriorityBadge'
import { errorMessages, isRetryable } from '../../../lib/api'
import { priorityChoices, priorityInput, priorityValue } from '../../../lib/priority'
import { useMayControlJob } from '../../projects/hooks/useMayControlJob'
import { useUpdateJobPriority } from '../api/update-job-priority'

interface PriorityControlProps {
  job: { id: number; name: string; owner: string; project: string; priority: number }
}

/**
 * A live job's priority: a select for whoever may change it (its owner, an admin of its project,
 * staff), PATCHing the job at once; the badge for everyone else. The server's refusal (403, or 400
 * above the project's ceiling) is shown under it.
 */
export function PriorityControl({ job }: PriorityControlProps) {
  const mayControl = useMayControlJob()
  const update = useUpdateJobPriority()
  if (!mayControl?.(job)) return <PriorityBadge priority={job.priority} />
  return (
    <span className="priority-control">
      <select
        aria-label={`Priority of ${job.name} (#${job.id})`}
        className={`prio-select prio-select-${job.priority > 0 ? 'high' : job.priority < 0 ? 'low' : 'normal'}`}
        // The choice shows while it is being saved; the job's own value once answered (or refused).
        value={update.isPending ? String(update.variables.priority) : priorityValue(job.priority)}
        disabled={update.isPending}
        onChange={(e) => update.mutate({ id: job.id, priority: priorityInput(e.target.value) })}
      >
        {priorityChoices(job.priority).map((c) => (
          <option key={c.value} value={c.value}>
            {c.label}
          </option>
        ))}
      </select>
      {update.isError && (
        <span className="field-error" role="alert">
          {errorMessages(update.error).join(' ')}
          {isRetryable(update.error) && (
            <button type="button" className="small" onClick={() => update.mutate(update.variables!)}>
              Retry
            </button>
          )}
        </span>
      )}
    </span>
  )
}
