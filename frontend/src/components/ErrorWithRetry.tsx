import type { ReactNode } from 'react'
import { isRetryable } from '../lib/api'

interface ErrorWithRetryProps {
  error: Error
  /** What failed, before the error's own message: "Could not load jobs: ". */
  children?: ReactNode
  /** Sends the same request again (a query's refetch, a mutation's mutate with its last variables). */
  onRetry: () => void
  retrying?: boolean
  /** The form-level look (under a form's buttons) instead of the inline one. */
  block?: boolean
}

/**
 * A failed request in words, with Retry when sending it again may work (no answer at all, a server
 * error: lib/api isRetryable). A refusal shows no Retry: the same request would be refused again.
 */
export function ErrorWithRetry({ error, children, onRetry, retrying = false, block = false }: ErrorWithRetryProps) {
  return (
    <div className={block ? 'form-error retryable-error' : 'inline-error retryable-error'} role="alert">
      <span>
        {children}
        {error.message}
      </span>
      {isRetryable(error) && (
        <button type="button" className="small" onClick={onRetry} disabled={retrying}>
          {retrying ? 'Retrying…' : 'Retry'}
        </button>
      )}
    </div>
  )
}
