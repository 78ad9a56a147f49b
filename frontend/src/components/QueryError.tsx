/** The one way a failed load is shown inline. */
export function QueryError({ error, what }: { error: Error; what: string }) {
  return (
    <div className="inline-error" role="alert">
      Could not load {what}: {error.message}
    </div>
  )
}
