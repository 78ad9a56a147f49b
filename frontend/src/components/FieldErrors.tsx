/** Validation messages under a form field (or for the whole form with `block`). */
export function FieldErrors({ messages, block }: { messages?: string[]; block?: boolean }) {
  if (!messages?.length) return null
  return (
    <span className={block ? 'form-error' : 'field-error'} role="alert">
      {messages.join(' ')}
    </span>
  )
}
