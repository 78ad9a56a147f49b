import { Field } from '../../../components/Field'
import { FieldErrors } from '../../../components/FieldErrors'
import { QueryError } from '../../../components/QueryError'
import { useMachines } from '../../machines/api/get-machines'
import { freeGpus, isPlaceable, type NewJobFormState } from '../new-job-spec'
import { SaveDefaultsButton } from './SaveDefaultsButton'

type NumberKey = 'nodes' | 'procs_per_node' | 'gpus_per_node' | 'min_gpu_memory_gb' | 'max_restarts'

interface Props {
  form: NewJobFormState
  errors: Record<string, string[]>
  onChange: (patch: Partial<NewJobFormState>) => void
}

/** Online machines with their free GPUs, ticked in order: the first ticked hosts the master. */
function MachinePicker({ form, errors, onChange }: Props) {
  const machines = useMachines()
  const online = (machines.data ?? []).filter(isPlaceable)
  const toggle = (name: string) =>
    onChange({
      machines: form.machines.includes(name) ? form.machines.filter((m) => m !== name) : [...form.machines, name],
    })
  return (
    <fieldset className="machine-picker">
      <legend>Pick machines (the first is the master)</legend>
      {machines.isPending && <p className="muted">Loading machines…</p>}
      {machines.isError && (
        <QueryError error={machines.error} what="machines" onRetry={() => void machines.refetch()} retrying={machines.isFetching} />
      )}
      {machines.data && online.length === 0 && <p className="muted">No machine is online.</p>}
      {online.map((m) => {
        const order = form.machines.indexOf(m.name)
        return (
          <label key={m.id} className="machine-choice">
            <input type="checkbox" checked={order >= 0} onChange={() => toggle(m.name)} />
            <span>{m.name}</span>
            <span className="muted">
              {freeGpus(m)} of {m.capabilities.gpu_count ?? 0} GPUs free · {m.status}
            </span>
            {order === 0 && <span className="badge plan-master">master</span>}
          </label>
        )
      })}
      {form.machines.length > 0 && form.machines.length < Number(form.nodes) && (
        <p className="form-hint">
          {form.machines.length} picked for {form.nodes} machines: pick more or lower the machine count.
        </p>
      )}
      <FieldErrors messages={errors.machines} />
    </fieldset>
  )
}

/**
 * TransformerLab's remote job dispatch: the whole job on one machine picked here, or on whichever the
 * planner picks. A picked machine that stopped reporting stays listed, so the choice is not lost.
 */
function SingleMachinePicker({ form, errors, onChange }: Props) {
  const machines = useMachines()
  const online = (machines.data ?? []).filter(isPlaceable)
  const gone = form.machine && !online.some((m) => m.name === form.machine)
  return (
    <>
      <Field label="Machine" errors={errors.machines}>
        <select name="machine" value={form.machine} onChange={(e) => onChange({ machine: e.target.value })}>
          <option value="">Any machine (the planner picks)</option>
          {online.map((m) => (
            <option key={m.id} value={m.name}>
              {m.name} · {freeGpus(m)} of {m.capabilities.gpu_count ?? 0} GPUs free · {m.status}
            </option>
          ))}
          {gone && <option value={form.machine}>{form.machine} (not online)</option>}
        </select>
      </Field>
      {machines.isError && (
        <QueryError error={machines.error} what="machines" onRetry={() => void machines.refetch()} retrying={machines.isFetching} />
      )}
    </>
  )
}

/**
 * Where the job runs. Without distributed training: one machine, picked or any. With it (TransformerLab's
 * toggle): how many machines, what each needs, and which ones.
 */
export function NewJobDistributedFields({ form, errors, onChange }: Props) {
  const numberField = (key: NumberKey, label: string, min: number, step = 1) => (
    <Field label={label} errors={errors[key]} narrow>
      <input
        name={key}
        type="number"
        min={min}
        step={step}
        required
        value={form[key]}
        onChange={(e) => onChange({ [key]: e.target.value })}
      />
    </Field>
  )
  return (
    <fieldset className="new-job-section">
      <legend>Machines</legend>
      <label className="distributed-toggle">
        <input
          type="checkbox"
          role="switch"
          name="distributed"
          checked={form.distributed}
          onChange={(e) => onChange({ distributed: e.target.checked })}
        />
        <span>Distributed training</span>
        <span className="muted">
          {form.distributed ? 'the job spans several machines' : 'off: the whole job runs on one machine'}
        </span>
      </label>
      {form.distributed && numberField('nodes', 'Machines', 1)}
      {numberField('procs_per_node', 'Processes/machine', 1)}
      {numberField('gpus_per_node', 'GPUs/machine', 0)}
      {numberField('min_gpu_memory_gb', 'Min GPU memory (GB)', 0, 0.5)}
      {numberField('max_restarts', 'Max restarts', 0)}
      <Field label="When a rank dies" errors={errors.recovery}>
        <select
          name="recovery"
          value={form.recovery}
          onChange={(e) => onChange({ recovery: e.target.value as NewJobFormState['recovery'] })}
        >
          <option value="restart">restart every rank from the last checkpoint</option>
          <option value="in_place">replace it alone, the others keep running (in place)</option>
        </select>
      </Field>
      {!form.distributed && <SingleMachinePicker form={form} errors={errors} onChange={onChange} />}
      {(form.distributed || !form.machine) && (
        <Field label="Placement" errors={errors.policy}>
          <select
            name="policy"
            value={form.policy}
            onChange={(e) => onChange({ policy: e.target.value as NewJobFormState['policy'] })}
          >
            <option value="pack">pack (fewest, fullest machines)</option>
            <option value="spread">spread (least loaded first)</option>
            <option value="simple">simple (from the Go scheduler: least GPU waste)</option>
            <option value="balanced">balanced (from the Go scheduler: fewest tasks, most free GPUs)</option>
          </select>
        </Field>
      )}
      {form.distributed && (
        <fieldset className="radio-row">
          <legend>Machine selection</legend>
          {(['auto', 'manual'] as const).map((selection) => (
            <label key={selection}>
              <input
                type="radio"
                name="selection"
                value={selection}
                checked={form.selection === selection}
                onChange={() => onChange({ selection })}
              />
              {selection === 'auto' ? 'Automatic' : 'Manual'}
            </label>
          ))}
        </fieldset>
      )}
      {form.distributed && form.selection === 'manual' && <MachinePicker form={form} errors={errors} onChange={onChange} />}
      <SaveDefaultsButton form={form} />
    </fieldset>
  )
}
