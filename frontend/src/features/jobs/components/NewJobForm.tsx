import { useState, type FormEvent } from 'react'
import { useMe } from '../../auth/api/get-me'
import { Field } from '../../../components/Field'
import { FieldErrors } from '../../../components/FieldErrors'
import { isApiError } from '../../../lib/api'
import type { JobDetail } from '../../../lib/types'
import { useCreateJob, type JobSpecInput } from '../api/create-job'
import { useRecipes } from '../api/get-recipes'
import { errorsByField } from './new-job-errors'

interface NewJobFormProps {
  onCreated: (job: JobDetail) => void
  onCancel: () => void
}

const DEFAULT_ENTRYPOINT = 'examples/mlp_ddp.py'

export function NewJobForm({ onCreated, onCancel }: NewJobFormProps) {
  const create = useCreateJob()
  const recipes = useRecipes()
  // A picker only for someone in several projects; everyone else submits to their one (or "default").
  const projects = useMe().data?.projects ?? []
  const [form, setForm] = useState({
    name: '',
    entrypoint: DEFAULT_ENTRYPOINT,
    nodes: '2',
    procs_per_node: '1',
    steps: '500',
    max_restarts: '3',
    project: '',
  })
  // Until the list arrives (or if it cannot), the chosen entrypoint is the only option.
  const choices = recipes.data ?? [{ entrypoint: form.entrypoint, summary: '' }]
  const summary = choices.find((r) => r.entrypoint === form.entrypoint)?.summary
  const chosenProject = form.project || (projects.includes('default') ? 'default' : (projects[0] ?? ''))
  const set = (key: keyof typeof form) => (e: { target: { value: string } }) =>
    setForm((f) => ({ ...f, [key]: e.target.value }))

  const errors: Record<string, string[]> = create.error
    ? isApiError(create.error) && create.error.status === 400
      ? errorsByField(create.error.body)
      : { '': [create.error.message] }
    : {}

  const onSubmit = (event: FormEvent<HTMLFormElement>) => {
    event.preventDefault()
    const spec: JobSpecInput = {
      name: form.name.trim(),
      entrypoint: form.entrypoint,
      ...(projects.length > 1 ? { project: chosenProject } : {}),
      args: ['--steps', form.steps.trim()],
      resources: { nodes: Number(form.nodes), procs_per_node: Number(form.procs_per_node) },
      fault_tolerance: { max_restarts: Number(form.max_restarts) },
    }
    create.mutate(spec, { onSuccess: onCreated })
  }

  const numberField = (key: 'nodes' | 'procs_per_node' | 'steps' | 'max_restarts', label: string, min: number) => (
    <Field label={label} errors={errors[key]} narrow>
      <input name={key} type="number" min={min} required value={form[key]} onChange={set(key)} />
    </Field>
  )

  return (
    <form className="inline-form" onSubmit={onSubmit} aria-label="New job">
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
      {numberField('nodes', 'Nodes', 1)}
      {numberField('procs_per_node', 'Procs/node', 1)}
      {numberField('steps', 'Steps', 1)}
      {numberField('max_restarts', 'Max restarts', 0)}
      <div className="form-actions">
        <button type="submit" className="primary" disabled={create.isPending}>
          {create.isPending ? 'Submitting…' : 'Submit'}
        </button>
        <button type="button" onClick={onCancel}>
          Cancel
        </button>
      </div>
      {summary && <p className="form-hint">{summary}</p>}
      <FieldErrors messages={errors['']} block />
    </form>
  )
}
