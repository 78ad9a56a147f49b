import { Field } from '../../../components/Field'
import { FieldErrors } from '../../../components/FieldErrors'
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

/** Seed 000's distributed options: how many machines, what each needs, and which ones. */
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
      <legend>Distributed training</legend>
      {numberField('nodes', 'Machines', 1)}
      {numberField('procs_per_node', 'Processes/machine', 1)}
      {numberField('gpus_per_node', 'GPUs/machine', 0)}
      {numberField('min_gpu_memory_gb', 'Min GPU memory (GB)', 0, 0.5)}
      {numberField('max_restarts', 'Max restarts', 0)}
      <Field label="Placement" errors={errors.policy}>
        <select
          name="policy"
          value={form.policy}
          onChange={(e) => onChange({ policy: e.target.value as NewJobFormState['policy'] })}
        >
          <option value="pack">pack (fewest, fullest machines)</option>
          <option value="spread">spread (least loaded first)</option>
          <option value="simple">simple (seed 004: least GPU waste)</option>
          <option value="balanced">balanced (seed 004: fewest tasks, most free GPUs)</option>
        </select>
      </Field>
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
      {form.selection === 'manual' && <MachinePicker form={form} errors={errors} onChange={onChange} />}
      <SaveDefaultsButton form={form} />
    </fieldset>
  )
}
