interface ProgressBarProps {
  value: number | null | undefined
  max: number | null | undefined
  /** Text shown next to the bar; defaults to "value / max". */
  label?: string
}

export function ProgressBar({ value, max, label }: ProgressBarProps) {
  const known = value != null && max != null && max > 0
  const percent = known ? Math.min(100, Math.max(0, (value / max) * 100)) : 0
  const text = label ?? (value == null ? '—' : max ? `${value} / ${max}` : String(value))
  return (
    <div className="progress" title={known ? `${percent.toFixed(1)}%` : undefined}>
      <div
        className="progress-track"
        role="progressbar"
        aria-valuemin={0}
        aria-valuemax={max ?? undefined}
        aria-valuenow={value ?? undefined}
      >
        <div className="progress-fill" style={{ width: `${percent}%` }} />
      </div>
      <span className="progress-label">{text}</span>
    </div>
  )
}
