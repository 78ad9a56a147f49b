interface StatusBadgeProps {
  status: string
  title?: string
}

/** Colour comes from the status name (see `.badge-<status>` in styles.css). */
export function StatusBadge({ status, title }: StatusBadgeProps) {
  return (
    <span className={`badge badge-${status}`} title={title}>
      {status}
    </span>
  )
}
