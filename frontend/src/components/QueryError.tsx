import { ErrorWithRetry } from './ErrorWithRetry'

interface QueryErrorProps {
  error: Error
  what: string
  /** The query's refetch. */
  onRetry: () => void
  retrying?: boolean
}

/** The one way a failed load is shown inline, with Retry where loading again may work. */
export function QueryError({ error, what, onRetry, retrying }: QueryErrorProps) {
  return (
    <ErrorWithRetry error={error} onRetry={onRetry} retrying={retrying}>
      Could not load {what}:{' '}
    </ErrorWithRetry>
  )
}
