import type { ReactNode } from 'react'
import { FieldErrors } from './FieldErrors'

interface FieldProps {
  label: string
  errors?: string[]
  narrow?: boolean
  children: ReactNode
}

/** A labelled input with its validation messages underneath (outside the label's name). */
export function Field({ label, errors, narrow, children }: FieldProps) {
  return (
    <div className={narrow ? 'field field-narrow' : 'field'}>
      <label>
        <span>{label}</span>
        {children}
      </label>
      <FieldErrors messages={errors} />
    </div>
  )
}
