interface StatusBadgeProps {
  status: string
  title?: string
}

// A status the dashboard has no colour for (a newer server's) still gets a badge, in grey.
const SAFE_CLASS = /^[a-z][a-z0-9_-]*$/

/** Colour comes from the status name (see `.badge-<status>` in styles.css). */
export function StatusBadge({ status, title }: StatusBadgeProps) {
  const known = SAFE_CLASS.test(status)
  return (
    <span className={known ? `badge badge-${status}` : 'badge'} title={title}>
      {status || 'unknown'}
    </span>
  )
}
