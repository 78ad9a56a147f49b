import { useState, type FormEvent } from 'react'
import { Field } from '../../../components/Field'
import { FieldErrors } from '../../../components/FieldErrors'
import { flattenFieldErrors, isApiError } from '../../../lib/api'
import type { MachineCreated } from '../../../lib/types'
import { agentCommand, useCreateMachine } from '../api/create-machine'

/** Shown once after registering: the token is not retrievable later. */
function AgentCommand({ machine, onDone }: { machine: MachineCreated; onDone: () => void }) {
  const command = agentCommand(window.location.origin, machine.token)
  const [copied, setCopied] = useState(false)
  const copy = () => {
    // navigator.clipboard exists only on secure origins (https or localhost).
    navigator.clipboard?.writeText(command).then(
      () => setCopied(true),
      () => setCopied(false),
    )
  }
  return (
    <div className="notice" role="status">
      <p>
        Machine <strong>{machine.name}</strong> registered. Run this on it to start its agent. The token is shown
        only once:
      </p>
      <pre className="command">{command}</pre>
      <div className="row">
        {typeof navigator !== 'undefined' && navigator.clipboard && (
          <button type="button" onClick={copy}>
            {copied ? 'Copied' : 'Copy'}
          </button>
        )}
        <button type="button" onClick={onDone}>
          Done
        </button>
      </div>
    </div>
  )
}

export function AddMachineForm({ onClose }: { onClose: () => void }) {
  const create = useCreateMachine()
  const [name, setName] = useState('')
  const [host, setHost] = useState('')

  if (create.data) return <AgentCommand machine={create.data} onDone={onClose} />

  const errors =
    create.error && isApiError(create.error) && create.error.status === 400
      ? flattenFieldErrors(create.error.body)
      : create.error
        ? { '': [create.error.message] }
        : {}

  const onSubmit = (event: FormEvent<HTMLFormElement>) => {
    event.preventDefault()
    create.mutate({ name: name.trim(), host: host.trim() })
  }

  return (
    <form className="inline-form" onSubmit={onSubmit} aria-label="Add machine">
      <Field label="Name" errors={errors.name}>
        <input name="name" required value={name} onChange={(e) => setName(e.target.value)} placeholder="gpu-01" />
      </Field>
      <Field label="Host" errors={errors.host}>
        <input name="host" required value={host} onChange={(e) => setHost(e.target.value)} placeholder="10.0.0.12" />
      </Field>
      <div className="form-actions">
        <button type="submit" className="primary" disabled={create.isPending}>
          {create.isPending ? 'Adding…' : 'Add'}
        </button>
        <button type="button" onClick={onClose}>
          Cancel
        </button>
      </div>
      <FieldErrors messages={errors['']} block />
    </form>
  )
}
