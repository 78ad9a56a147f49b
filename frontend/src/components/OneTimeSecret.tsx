import { useState, type ReactNode } from 'react'

interface OneTimeSecretProps {
  /** What was created and how the secret is used; says that it is shown only once. */
  children: ReactNode
  /** The text to copy: a token, or the command line that carries one. */
  secret: string
  onDone: () => void
}

/**
 * A secret the server shows this once (it keeps only a hash): the text, a Copy button and Done.
 * The text is selectable as a whole too, for where the clipboard API is missing.
 */
export function OneTimeSecret({ children, secret, onDone }: OneTimeSecretProps) {
  const [copied, setCopied] = useState(false)
  // navigator.clipboard exists only on secure origins (https or localhost).
  const clipboard = typeof navigator !== 'undefined' ? navigator.clipboard : undefined
  const copy = () => {
    clipboard?.writeText(secret).then(
      () => setCopied(true),
      () => setCopied(false),
    )
  }
  return (
    <div className="notice" role="status">
      <p>{children}</p>
      <pre className="command">{secret}</pre>
      <div className="row">
        {clipboard && (
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
