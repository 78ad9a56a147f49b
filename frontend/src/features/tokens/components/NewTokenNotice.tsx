import { useState } from 'react'
import type { ApiTokenCreated } from '../api/create-token'

/** Shown once after creating a token: the server keeps only its hash, so it cannot be shown again. */
export function NewTokenNotice({ token, onDone }: { token: ApiTokenCreated; onDone: () => void }) {
  const [copied, setCopied] = useState(false)
  const copy = () => {
    // navigator.clipboard exists only on secure origins (https or localhost).
    navigator.clipboard?.writeText(token.token).then(
      () => setCopied(true),
      () => setCopied(false),
    )
  }
  return (
    <div className="notice" role="status">
      <p>
        Token <strong>{token.name}</strong> created. Copy it now: it is shown only once. Scripts send it as{' '}
        <code>Authorization: Token …</code>; the CLI reads it from <code>TORCHYARD_TOKEN</code>.
      </p>
      <pre className="command">{token.token}</pre>
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
