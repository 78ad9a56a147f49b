interface UsageBarProps {
  /** percent, 0..100 */
  percent: number | null | undefined
  label: string
}

/** A compact percent bar for machine load; turns amber then red as it fills. */
export function UsageBar({ percent, label }: UsageBarProps) {
  if (percent == null) return <span className="muted">—</span>
  const clamped = Math.min(100, Math.max(0, percent))
  const level = clamped >= 90 ? 'high' : clamped >= 70 ? 'mid' : 'low'
  return (
    <div className="usage" title={`${label} ${clamped.toFixed(0)}%`}>
      <div className="usage-track" aria-label={`${label} usage`}>
        <div className={`usage-fill usage-${level}`} style={{ width: `${clamped}%` }} />
      </div>
      <span className="usage-label">{clamped.toFixed(0)}%</span>
    </div>
  )
}
