import { useMemo, useState, type FormEvent } from 'react'
import { ErrorWithRetry } from '../../../components/ErrorWithRetry'
import { Field } from '../../../components/Field'
import { FieldErrors } from '../../../components/FieldErrors'
import { OneTimeSecret } from '../../../components/OneTimeSecret'
import { flattenFieldErrors, isApiError } from '../../../lib/api'
import type { Machine } from '../../../lib/types'
import { useCreateMachine } from '../api/create-machine'
import { DEFAULT_PORT, hasErrors, parseLabels, validateAddMachine, type AddMachineInput } from './add-machine-validation'

type Touched = Partial<Record<keyof AddMachineInput, boolean>>

export function AddMachineForm({ machines, onClose }: { machines: readonly Machine[]; onClose: () => void }) {
  const create = useCreateMachine()
  const [input, setInput] = useState<AddMachineInput>({ name: '', host: '', port: '', labels: '' })
  // A field's problems show once something was typed in it (or it was left, or Add was pressed), not
  // before: an empty form is not wrong yet.
  const [touched, setTouched] = useState<Touched>({})
  const takenNames = useMemo(() => new Set(machines.map((m) => m.name)), [machines])

  if (create.data) {
    const machine = create.data
    // The server's own join command: it names the server as agents reach it (TORCHYARD_PUBLIC_URL), which
    // need not be the address this browser uses.
    return (
      <OneTimeSecret secret={machine.agent_command} onDone={onClose}>
        Machine <strong>{machine.name}</strong> added. Run this on it to start its agent and join the cluster. The
        token is shown only once:
      </OneTimeSecret>
    )
  }

  const local = validateAddMachine(input, takenNames)
  // A 400 lands on its fields; anything else is one message under the form, with Retry where
  // sending the same machine again may work (ErrorWithRetry).
  const invalid = isApiError(create.error) && create.error.status === 400
  const server = invalid && isApiError(create.error) ? flattenFieldErrors(create.error.body) : {}
  const errorsOf = (field: keyof AddMachineInput) => (touched[field] ? local[field] : undefined) ?? server[field]

  const edit = (field: keyof AddMachineInput) => (value: string) => {
    setInput((old) => ({ ...old, [field]: value }))
    setTouched((old) => ({ ...old, [field]: true }))
    // The server's answer was about what was there before.
    if (create.error) create.reset()
  }
  const leave = (field: keyof AddMachineInput) => () => setTouched((old) => ({ ...old, [field]: true }))

  const onSubmit = (event: FormEvent<HTMLFormElement>) => {
    event.preventDefault()
    setTouched({ name: true, host: true, port: true, labels: true })
    if (hasErrors(local)) return
    const port = input.port.trim()
    create.mutate({
      name: input.name.trim(),
      host: input.host.trim(),
      ...(port ? { port: Number(port) } : {}),
      labels: parseLabels(input.labels).labels,
    })
  }

  const inputProps = (field: keyof AddMachineInput) => ({
    name: field,
    value: input[field],
    onChange: (e: { target: { value: string } }) => edit(field)(e.target.value),
    onBlur: leave(field),
    'aria-invalid': errorsOf(field)?.length ? true : undefined,
    autoComplete: 'off',
    spellCheck: false,
  })

  return (
    <form className="inline-form add-machine-form" onSubmit={onSubmit} aria-label="Add machine" noValidate>
      <Field label="Name" errors={errorsOf('name')}>
        <input {...inputProps('name')} maxLength={100} placeholder="gpu-01" />
      </Field>
      <Field label="Host" errors={errorsOf('host')}>
        <input {...inputProps('host')} maxLength={255} placeholder="10.0.0.12" />
      </Field>
      <Field label="Port" errors={errorsOf('port')} narrow>
        <input {...inputProps('port')} inputMode="numeric" maxLength={5} placeholder={String(DEFAULT_PORT)} />
      </Field>
      <Field label="Labels" errors={errorsOf('labels')}>
        <input {...inputProps('labels')} placeholder="rack=3, gpu=a100" />
      </Field>
      <div className="form-actions">
        <button type="submit" className="primary" disabled={create.isPending}>
          {create.isPending ? 'Adding…' : 'Add'}
        </button>
        <button type="button" onClick={onClose}>
          Cancel
        </button>
      </div>
      <p className="form-hint">
        The host is the address the other machines reach it at; the port is kept with it, as TransformerLab's machine
        list has it ({DEFAULT_PORT} if left empty: Torchyard's agent connects out and needs no open port). Adding it
        gives a command to run there, with its token.
      </p>
      <FieldErrors messages={server['']} block />
      {create.error && !invalid && (
        <ErrorWithRetry error={create.error} onRetry={() => create.mutate(create.variables!)} retrying={create.isPending} block>
          Could not add the machine:{' '}
        </ErrorWithRetry>
      )}
    </form>
  )
}
