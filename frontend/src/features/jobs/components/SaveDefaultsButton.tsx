import { ErrorWithRetry } from '../../../components/ErrorWithRetry'
import { FieldErrors } from '../../../components/FieldErrors'
import { flattenFieldErrors, isApiError } from '../../../lib/api'
import { useSaveDistributedPreferences } from '../api/distributed-preferences'
import type { NewJobFormState } from '../new-job-spec'

/** The form's names for what a refused save names. */
const LABELS: Record<string, string> = {
  preferred_machines: 'Machines picked',
  default_num_machines: 'Machines',
  default_procs_per_machine: 'Processes/machine',
  default_gpus_per_machine: 'GPUs/machine',
  auto_machine_selection: 'Machine selection',
}

/** A refused save's messages, each with the form's name for what it names. */
function messagesOf(error: Error | null): string[] {
  if (!isApiError(error) || error.status !== 400) return []
  return Object.entries(flattenFieldErrors(error.body)).flatMap(([path, messages]) => {
    const label = LABELS[path.split('.')[0]] ?? path
    return messages.map((m) => (label ? `${label}: ${m}` : m))
  })
}

/**
 * "Save as my defaults": the distributed section as it stands (machine count, processes and GPUs
 * per machine, automatic or manual selection, the machines picked) becomes what the New job form
 * starts from next time, saved on the server for this user.
 */
export function SaveDefaultsButton({ form }: { form: NewJobFormState }) {
  const save = useSaveDistributedPreferences()
  return (
    <div className="save-defaults">
      <button type="button" className="small" onClick={() => save.mutate(form)} disabled={save.isPending}>
        {save.isPending ? 'Saving…' : 'Save as my defaults'}
      </button>
      <span className="muted small" role="status">
        {save.isSuccess ? 'Saved: new jobs start from these settings.' : 'machine count, processes, GPUs and machine selection'}
      </span>
      <FieldErrors messages={messagesOf(save.error)} block />
      {save.error && !(isApiError(save.error) && save.error.status === 400) && (
        <ErrorWithRetry error={save.error} onRetry={() => save.mutate(save.variables!)} retrying={save.isPending} block>
          Could not save the defaults:{' '}
        </ErrorWithRetry>
      )}
    </div>
  )
}
