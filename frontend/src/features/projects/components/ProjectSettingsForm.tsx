import { useState, type FormEvent } from 'react'
import { ErrorWithRetry } from '../../../components/ErrorWithRetry'
import { FieldErrors } from '../../../components/FieldErrors'
import { flattenFieldErrors, isApiError } from '../../../lib/api'
import { priorityChoices, priorityInput, priorityValue } from '../../../lib/priority'
import type { Project, ProjectSettings } from '../../../lib/types'
import { useUpdateProject } from '../api/update-project'

const quotaText = (value: number | null) => (value == null ? '' : String(value))
/** A quota input's value: blank is no limit (null), anything else the number as typed. */
const quotaValue = (text: string): number | null => (text.trim() === '' ? null : Number(text))

/**
 * A project's settings, as its admins may change them: the priority ceiling; for staff also the
 * quotas (GPUs and processes its running jobs may hold at once; blank: no limit) and borrowing.
 * Only what changed is sent; the server's messages show beside each field.
 */
export function ProjectSettingsForm({ project, staff, onDone }: { project: Project; staff: boolean; onDone: () => void }) {
  const update = useUpdateProject()
  const [ceiling, setCeiling] = useState(priorityValue(project.priority_ceiling))
  const [maxGpus, setMaxGpus] = useState(quotaText(project.max_gpus))
  const [maxProcesses, setMaxProcesses] = useState(quotaText(project.max_processes))
  const [borrow, setBorrow] = useState(project.borrow)

  // A 400 lands on its fields; anything else is one message, with Retry where sending again may work.
  const invalid = isApiError(update.error) && update.error.status === 400
  const errors = invalid && isApiError(update.error) ? flattenFieldErrors(update.error.body) : {}

  const submit = (event: FormEvent) => {
    event.preventDefault()
    const settings: ProjectSettings = {}
    if (ceiling !== priorityValue(project.priority_ceiling)) settings.priority_ceiling = priorityInput(ceiling)
    if (staff) {
      if (quotaValue(maxGpus) !== project.max_gpus) settings.max_gpus = quotaValue(maxGpus)
      if (quotaValue(maxProcesses) !== project.max_processes) settings.max_processes = quotaValue(maxProcesses)
      if (borrow !== project.borrow) settings.borrow = borrow
    }
    if (Object.keys(settings).length === 0) return onDone()
    update.mutate({ name: project.name, settings }, { onSuccess: onDone })
  }
  const staffOnly = staff ? undefined : 'only staff set quotas and borrowing'

  return (
    <form className="project-settings" aria-label={`Settings of ${project.name}`} onSubmit={submit}>
      <label>
        <span>Priority ceiling</span>
        <select name="priority_ceiling" value={ceiling} onChange={(e) => setCeiling(e.target.value)}>
          {priorityChoices(project.priority_ceiling).map((c) => (
            <option key={c.value} value={c.value}>
              {c.label}
            </option>
          ))}
        </select>
        <FieldErrors messages={errors.priority_ceiling} />
      </label>
      <label title={staffOnly}>
        <span>Max GPUs</span>
        <input
          name="max_gpus"
          type="number"
          min={0}
          placeholder="no limit"
          value={maxGpus}
          disabled={!staff}
          onChange={(e) => setMaxGpus(e.target.value)}
        />
        <FieldErrors messages={errors.max_gpus} />
      </label>
      <label title={staffOnly}>
        <span>Max processes</span>
        <input
          name="max_processes"
          type="number"
          min={0}
          placeholder="no limit"
          value={maxProcesses}
          disabled={!staff}
          onChange={(e) => setMaxProcesses(e.target.value)}
        />
        <FieldErrors messages={errors.max_processes} />
      </label>
      <label className="inline-label" title={staffOnly}>
        <input name="borrow" type="checkbox" checked={borrow} disabled={!staff} onChange={(e) => setBorrow(e.target.checked)} />
        <span>May borrow idle capacity past its quota</span>
      </label>
      <div className="form-actions">
        <button type="submit" className="primary small" disabled={update.isPending}>
          {update.isPending ? 'Saving…' : 'Save'}
        </button>
        <button type="button" className="small" onClick={onDone}>
          Cancel
        </button>
        {!staff && <span className="muted small">Staff set the quotas and borrowing.</span>}
      </div>
      <FieldErrors messages={[...(errors[''] ?? []), ...(errors.borrow ?? []), ...(errors.description ?? [])]} block />
      {update.error && !invalid && (
        <ErrorWithRetry
          error={update.error}
          onRetry={() => update.mutate(update.variables!, { onSuccess: onDone })}
          retrying={update.isPending}
          block
        >
          Could not save the settings:{' '}
        </ErrorWithRetry>
      )}
    </form>
  )
}
