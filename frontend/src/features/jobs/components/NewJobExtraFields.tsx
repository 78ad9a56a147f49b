import { FieldErrors } from '../../../components/FieldErrors'
import type { EnvRow, NewJobFormState } from '../new-job-spec'

interface Props {
  form: NewJobFormState
  errors: Record<string, string[]>
  onChange: (patch: Partial<NewJobFormState>) => void
}

const replaced = <T,>(list: T[], index: number, item: T) => list.map((old, i) => (i === index ? item : old))
const removed = <T,>(list: T[], index: number) => list.filter((_, i) => i !== index)

/** Extra script arguments (one per row, after `--steps N`) and environment variables for every rank. */
export function NewJobExtraFields({ form, errors, onChange }: Props) {
  const setEnv = (env: EnvRow[]) => onChange({ env })
  return (
    <>
      <fieldset className="new-job-section rows">
        <legend>Arguments</legend>
        {form.args.map((arg, i) => (
          <div className="row" key={i}>
            <input
              aria-label={`Argument ${i + 1}`}
              value={arg}
              placeholder="--flag or value"
              onChange={(e) => onChange({ args: replaced(form.args, i, e.target.value) })}
            />
            <button type="button" className="small" onClick={() => onChange({ args: removed(form.args, i) })}>
              Remove
            </button>
          </div>
        ))}
        <button type="button" className="small" onClick={() => onChange({ args: [...form.args, ''] })}>
          Add argument
        </button>
        <FieldErrors messages={errors.args} />
      </fieldset>
      <fieldset className="new-job-section rows">
        <legend>Environment</legend>
        {form.env.map((row, i) => (
          <div className="row" key={i}>
            <input
              aria-label={`Variable ${i + 1} name`}
              value={row.key}
              placeholder="NAME"
              onChange={(e) => setEnv(replaced(form.env, i, { ...row, key: e.target.value }))}
            />
            <input
              aria-label={`Variable ${i + 1} value`}
              value={row.value}
              placeholder="value"
              onChange={(e) => setEnv(replaced(form.env, i, { ...row, value: e.target.value }))}
            />
            <button type="button" className="small" onClick={() => setEnv(removed(form.env, i))}>
              Remove
            </button>
          </div>
        ))}
        <button type="button" className="small" onClick={() => setEnv([...form.env, { key: '', value: '' }])}>
          Add variable
        </button>
        <FieldErrors messages={errors.env} />
      </fieldset>
    </>
  )
}
