import { useState, type FormEvent } from 'react'
import { useMe } from '../../auth/api/get-me'
import { Field } from '../../../components/Field'
import { FieldErrors } from '../../../components/FieldErrors'
import { isApiError } from '../../../lib/api'
import type { JobDetail } from '../../../lib/types'
import { useCreateJob, type JobSpecInput } from '../api/create-job'
import { useDistributedPreferences } from '../api/distributed-preferences'
import { useRecipes } from '../api/get-recipes'
import { usePlanJob } from '../api/plan-job'
import { buildSpec, initialFormState, withPreferences, type NewJobFormState } from '../new-job-spec'
import { errorsByField, planRefusalOf } from './new-job-errors'
import { NewJobDistributedFields } from './NewJobDistributedFields'
import { NewJobExtraFields } from './NewJobExtraFields'
import { PlanRefusalView, PlanView } from './PlanView'
import '../new-job.css'

interface NewJobFormProps {
  onCreated: (job: JobDetail) => void
  onCancel: () => void
}

/** A 400's field errors by form field, or the one message of anything else. */
function errorsOf(error: Error | null): Record<string, string[]> {
  if (!error) return {}
  return isApiError(error) && error.status === 400 ? errorsByField(error.body) : { '': [error.message] }
}

/**
 * The New job form: Plan shows where every rank would go (POST /api/jobs/plan, nothing launched);
 * Launch submits exactly the spec that was planned.
 */
export function NewJobForm({ onCreated, onCancel }: NewJobFormProps) {
  const plan = usePlanJob()
  const create = useCreateJob()
  const recipes = useRecipes()
  // A picker only for someone in several projects; everyone else submits to their one (or "default").
  const projects = useMe().data?.projects ?? []
  const [form, setForm] = useState<NewJobFormState>(initialFormState)
  const change = (patch: Partial<NewJobFormState>) => setForm((f) => ({ ...f, ...patch }))
  // The user's saved distributed defaults fill the form once, as they arrive; never saved, the
  // built-in ones stay. A later "Save as my defaults" changes the next form, not this one.
  const preferences = useDistributedPreferences().data
  const [prefilled, setPrefilled] = useState(false)
  if (preferences && !prefilled) {
    setPrefilled(true)
    if (preferences.updated_at) setForm((f) => withPreferences(f, preferences))
  }
  const set = (key: 'name' | 'project' | 'entrypoint' | 'steps' | 'batch_size' | 'lr' | 'scaling') =>
    (e: { target: { value: string } }) => change({ [key]: e.target.value })

  // Until the list arrives (or if it cannot), the chosen entrypoint is the only option.
  const choices = recipes.data ?? [{ entrypoint: form.entrypoint, summary: '' }]
  const summary = choices.find((r) => r.entrypoint === form.entrypoint)?.summary
  const chosenProject = form.project || (projects.includes('default') ? 'default' : (projects[0] ?? ''))
  const spec = buildSpec(form, projects.length > 1 ? chosenProject : null)

  // Errors of whichever came last: the launch (reset by planning again) or the plan.
  const error = create.error ?? plan.error
  const refusal = isApiError(error) && error.status === 400 ? planRefusalOf(error.body) : null
  const errors = refusal ? {} : errorsOf(error)
  const planned = plan.data && plan.variables
  const stale = Boolean(planned && JSON.stringify(planned) !== JSON.stringify(spec))

  const onPlan = (event: FormEvent<HTMLFormElement>) => {
    event.preventDefault()
    create.reset()
    plan.mutate(spec)
  }
  const launch = (what: JobSpecInput) => create.mutate(what, { onSuccess: onCreated })

  return (
    <form className="inline-form new-job-form" onSubmit={onPlan} aria-label="New job">
      <Field label="Name" errors={errors.name}>
        <input name="name" required value={form.name} onChange={set('name')} placeholder="mnist-ddp" />
      </Field>
      {projects.length > 1 && (
        <Field label="Project" errors={errors.project}>
          <select name="project" value={chosenProject} onChange={set('project')}>
            {projects.map((p) => (
              <option key={p} value={p}>
                {p}
              </option>
            ))}
          </select>
        </Field>
      )}
      <Field label="Entrypoint" errors={errors.entrypoint}>
        <select name="entrypoint" value={form.entrypoint} onChange={set('entrypoint')}>
          {choices.map((r) => (
            <option key={r.entrypoint} value={r.entrypoint} title={r.summary}>
              {r.entrypoint}
            </option>
          ))}
        </select>
      </Field>
      <Field label="Steps" errors={errors.steps} narrow>
        <input name="steps" type="number" min={1} required value={form.steps} onChange={set('steps')} />
      </Field>
      {summary && <p className="form-hint">{summary}</p>}
      <NewJobDistributedFields form={form} errors={errors} onChange={change} />
      <fieldset className="new-job-section">
        <legend>Hyperparameters</legend>
        <Field label="Batch size" errors={errors.batch_size} narrow>
          <input name="batch_size" type="number" min={1} value={form.batch_size} onChange={set('batch_size')} />
        </Field>
        <Field label="Learning rate" errors={errors.lr} narrow>
          <input name="lr" type="number" min={0} step="any" value={form.lr} onChange={set('lr')} />
        </Field>
        <Field label="Scaling" errors={errors.scaling}>
          <select name="scaling" value={form.scaling} onChange={set('scaling')}>
            <option value="keep_global_batch">keep the global batch (split it over ranks)</option>
            <option value="scale_global_batch">scale the global batch (LR × world size)</option>
            <option value="none">none</option>
          </select>
        </Field>
      </fieldset>
      <NewJobExtraFields form={form} errors={errors} onChange={change} />
      <div className="form-actions">
        <button type="submit" className="primary" disabled={plan.isPending}>
          {plan.isPending ? 'Planning…' : 'Plan'}
        </button>
        <button type="button" onClick={onCancel}>
          Cancel
        </button>
      </div>
      <FieldErrors messages={errors['']} block />
      {refusal && (
        <PlanRefusalView
          refusal={refusal}
          picked={form.selection === 'manual' ? form.machines : []}
          nodes={Number(form.nodes)}
          gpusPerNode={Number(form.gpus_per_node)}
          onUseMachines={(machines) => change({ selection: 'manual', machines })}
          onLowerNodes={(nodes) => change({ nodes: String(nodes) })}
          onLaunchAnyway={() => launch(spec)}
          launching={create.isPending}
        />
      )}
      {planned && !refusal && (
        <PlanView
          plan={plan.data}
          asked={planned.hyperparameters ?? {}}
          stale={stale}
          launching={create.isPending}
          onLaunch={() => launch(planned)}
        />
      )}
    </form>
  )
}
