import { useState, type FormEvent } from 'react'
import { useMe } from '../../auth/api/get-me'
import { useMachines } from '../../machines/api/get-machines'
import { ErrorWithRetry } from '../../../components/ErrorWithRetry'
import { Field } from '../../../components/Field'
import { FieldErrors } from '../../../components/FieldErrors'
import { isApiError } from '../../../lib/api'
import type { JobDetail, JobSpecInput } from '../../../lib/types'
import { useDistributedPreferences } from '../api/distributed-preferences'
import { usePlugins } from '../api/get-plugins'
import { useLaunchJob, type Launch } from '../api/launch-job'
import { usePlanJob } from '../api/plan-job'
import {
  buildSpec,
  defaultPlugin,
  formErrors,
  initialFormState,
  pinnedMachines,
  runsBuiltinRecipe,
  withPlugin,
  withPreferences,
  type NewJobFormState,
} from '../new-job-spec'
import { errorsByField, planRefusalOf } from './new-job-errors'
import { NewJobDistributedFields } from './NewJobDistributedFields'
import { NewJobExtraFields } from './NewJobExtraFields'
import { PlanRefusalView, PlanView } from './PlanView'
import { PluginPicker } from './PluginPicker'
import '../new-job.css'

interface NewJobFormProps {
  onCreated: (job: JobDetail) => void
  onCancel: () => void
}

/**
 * The New job form: Plan shows where every rank would go (POST /api/jobs/plan, nothing launched);
 * Launch submits exactly the spec that was planned, to the one machine picked when distributed
 * training is off and a machine is (TransformerLab's remote dispatch). A request that got no answer or a
 * server error offers Retry; the form keeps everything typed whatever happens.
 */
export function NewJobForm({ onCreated, onCancel }: NewJobFormProps) {
  const plan = usePlanJob()
  const launch = useLaunchJob()
  const machines = useMachines()
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
  // The default recipe, with its config, once the plugin list arrives.
  const plugins = usePlugins().data
  const firstPlugin = plugins && !form.plugin ? defaultPlugin(plugins) : undefined
  if (firstPlugin) setForm((f) => withPlugin(f, firstPlugin))

  const set = (key: 'name' | 'project' | 'steps' | 'batch_size' | 'lr' | 'scaling' | 'config') =>
    (e: { target: { value: string } }) => change({ [key]: e.target.value })

  const chosenProject = form.project || (projects.includes('default') ? 'default' : (projects[0] ?? ''))
  const spec = buildSpec(form, projects.length > 1 ? chosenProject : null)
  const local = formErrors(form)

  // Errors of whichever came last: the launch (reset by planning again) or the plan. A 400 lands on
  // its fields; anything else is one message, with Retry when sending again may work.
  const error = launch.error ?? plan.error
  const invalid = isApiError(error) && error.status === 400 ? error.body : null
  const refusal = invalid ? planRefusalOf(invalid) : null
  const errors = { ...(invalid && !refusal ? errorsByField(invalid, { steps: runsBuiltinRecipe(form) }) : {}), ...local }
  const planned = plan.data && plan.variables
  const stale = Boolean(planned && JSON.stringify(planned) !== JSON.stringify(spec))

  const onPlan = (event: FormEvent<HTMLFormElement>) => {
    event.preventDefault()
    if (Object.keys(local).length) return
    launch.reset()
    plan.mutate(spec)
  }
  const submit = (what: Launch) => launch.mutate(what, { onSuccess: onCreated })
  // The one machine picked (single-machine jobs only) goes through dispatch_job, by id.
  const target = form.distributed ? undefined : machines.data?.find((m) => m.name === form.machine)
  const launchSpec = (what: JobSpecInput) => submit({ spec: what, machineId: target?.id ?? null })
  const retry = () => (launch.error ? submit(launch.variables!) : plan.mutate(plan.variables!))

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
      <PluginPicker form={form} errors={errors} onChange={change} />
      {runsBuiltinRecipe(form) && (
        <Field label="Steps" errors={errors.steps} narrow>
          <input name="steps" type="number" min={1} required value={form.steps} onChange={set('steps')} />
        </Field>
      )}
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
        <Field label="Config (JSON)" errors={errors.config}>
          <textarea
            name="config"
            className="config-json"
            rows={Math.min(8, Math.max(2, form.config.split('\n').length))}
            value={form.config}
            onChange={set('config')}
            placeholder='{"epochs": 2}'
            spellCheck={false}
          />
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
      {error && !invalid && (
        <ErrorWithRetry error={error} onRetry={retry} retrying={plan.isPending || launch.isPending} block>
          {launch.error ? 'Could not launch the job: ' : 'Could not plan the job: '}
        </ErrorWithRetry>
      )}
      {refusal && (
        <PlanRefusalView
          refusal={refusal}
          picked={pinnedMachines(form)}
          nodes={form.distributed ? Number(form.nodes) : 1}
          gpusPerNode={Number(form.gpus_per_node)}
          onUseMachines={(names) =>
            change(form.distributed ? { selection: 'manual', machines: names } : { machine: names[0] ?? '' })
          }
          onLowerNodes={(nodes) => change({ nodes: String(nodes) })}
          onLaunchAnyway={() => launchSpec(spec)}
          launching={launch.isPending}
        />
      )}
      {planned && !refusal && (
        <PlanView
          plan={plan.data}
          asked={planned.hyperparameters ?? {}}
          stale={stale}
          launching={launch.isPending}
          onLaunch={() => launchSpec(planned)}
        />
      )}
    </form>
  )
}
