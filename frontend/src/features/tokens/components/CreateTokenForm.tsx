import { useState, type FormEvent } from 'react'
import { ErrorWithRetry } from '../../../components/ErrorWithRetry'
import { Field } from '../../../components/Field'
import { FieldErrors } from '../../../components/FieldErrors'
import { flattenFieldErrors, isApiError } from '../../../lib/api'
import { useCreateToken } from '../api/create-token'
import { NewTokenNotice } from './NewTokenNotice'

const EXPIRIES = [
  { label: 'Never', days: '' },
  { label: 'In 7 days', days: '7' },
  { label: 'In 30 days', days: '30' },
  { label: 'In 90 days', days: '90' },
  { label: 'In a year', days: '365' },
]

export function CreateTokenForm({ onClose }: { onClose: () => void }) {
  const create = useCreateToken()
  const [name, setName] = useState('')
  const [days, setDays] = useState('')

  if (create.data) return <NewTokenNotice token={create.data} onDone={onClose} />

  // A 400 lands on its fields; anything else is one message, with Retry where sending again may work.
  const invalid = isApiError(create.error) && create.error.status === 400
  const errors = invalid && isApiError(create.error) ? flattenFieldErrors(create.error.body) : {}

  const onSubmit = (event: FormEvent<HTMLFormElement>) => {
    event.preventDefault()
    create.mutate(days ? { name: name.trim(), expires_in_days: Number(days) } : { name: name.trim() })
  }

  return (
    <form className="inline-form" onSubmit={onSubmit} aria-label="New API token">
      <Field label="Name" errors={errors.name}>
        <input name="name" required maxLength={100} value={name} onChange={(e) => setName(e.target.value)} placeholder="laptop, CI…" />
      </Field>
      <Field label="Expires" errors={errors.expires_in_days}>
        <select name="expires" value={days} onChange={(e) => setDays(e.target.value)}>
          {EXPIRIES.map((option) => (
            <option key={option.label} value={option.days}>
              {option.label}
            </option>
          ))}
        </select>
      </Field>
      <div className="form-actions">
        <button type="submit" className="primary" disabled={create.isPending}>
          {create.isPending ? 'Creating…' : 'Create'}
        </button>
        <button type="button" onClick={onClose}>
          Cancel
        </button>
      </div>
      <FieldErrors messages={errors['']} block />
      {create.error && !invalid && (
        <ErrorWithRetry error={create.error} onRetry={() => create.mutate(create.variables!)} retrying={create.isPending} block>
          Could not create the token:{' '}
        </ErrorWithRetry>
      )}
    </form>
  )
}
