const GiB = 1024 ** 3

export function formatGiB(bytes: number | null | undefined): string {
  if (bytes == null) return '—'
  const value = bytes / GiB
  return value >= 100 ? value.toFixed(0) : value.toFixed(1)
}

/** Bytes as B, kB, MB or GB (powers of 1000, as the CLI prints them). */
export function formatBytes(bytes: number | null | undefined): string {
  if (bytes == null) return '—'
  const units = ['B', 'kB', 'MB', 'GB', 'TB']
  let value = bytes
  let unit = 0
  while (value >= 1000 && unit < units.length - 1) {
    value /= 1000
    unit += 1
  }
  return unit === 0 ? `${value} B` : `${value.toFixed(1)} ${units[unit]}`
}

export function formatNumber(value: number | null | undefined, digits = 2): string {
  if (value == null || Number.isNaN(value)) return '—'
  if (Math.abs(value) >= 1000) return Math.round(value).toLocaleString('en-US')
  if (Number.isInteger(value)) return String(value)
  return value.toFixed(digits)
}

export function formatLoss(value: number | null | undefined): string {
  if (value == null || Number.isNaN(value)) return '—'
  return Math.abs(value) >= 0.01 ? value.toFixed(4) : value.toExponential(2)
}

/** How a metric's values read: a loss to four places (or in exponent form), throughput to one, the rest to three. */
export function metricFormatter(name: string): (value: number) => string {
  if (name === 'loss') return formatLoss
  if (name === 'throughput') return (value) => formatNumber(value, 1)
  return (value) => formatNumber(value, 3)
}

export function formatDuration(seconds: number | null | undefined): string {
  if (seconds == null || Number.isNaN(seconds)) return '—'
  const s = Math.max(0, Math.round(seconds))
  if (s < 60) return `${s}s`
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`
  return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`
}

/** "12s ago", "5m ago", "3h ago", "2d ago"; `now` is passed in so callers control re-rendering. */
export function formatRelative(iso: string | null | undefined, now: number): string {
  if (!iso) return 'never'
  const then = Date.parse(iso)
  if (Number.isNaN(then)) return '—'
  const seconds = Math.round((now - then) / 1000)
  if (seconds < 5) return 'just now'
  if (seconds < 60) return `${seconds}s ago`
  if (seconds < 3600) return `${Math.floor(seconds / 60)}m ago`
  if (seconds < 86400) return `${Math.floor(seconds / 3600)}h ago`
  return `${Math.floor(seconds / 86400)}d ago`
}

export function formatDateTime(iso: string | null | undefined): string {
  if (!iso) return '—'
  const date = new Date(iso)
  if (Number.isNaN(date.getTime())) return '—'
  return date.toLocaleString(undefined, {
    month: 'short',
    day: 'numeric',
    hour: '2-digit',
    minute: '2-digit',
  })
}

// One formatter for every log line: toLocaleTimeString builds a new one per call, which shows when
// a log of thousands of lines re-renders ten times a second.
const CLOCK = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit', hour12: false })

export function formatClock(iso: string): string {
  const date = new Date(iso)
  if (Number.isNaN(date.getTime())) return ''
  return CLOCK.format(date)
}
