import { useEffect, useState } from 'react'
import { formatRelative } from '../lib/format'

/** "12s ago", refreshed every few seconds; the exact time is in the tooltip. */
export function RelativeTime({ iso, intervalMs = 5_000 }: { iso: string | null | undefined; intervalMs?: number }) {
  const [now, setNow] = useState(() => Date.now())
  useEffect(() => {
    const timer = setInterval(() => setNow(Date.now()), intervalMs)
    return () => clearInterval(timer)
  }, [intervalMs])
  return (
    <time dateTime={iso ?? undefined} title={iso ? new Date(iso).toLocaleString() : undefined}>
      {formatRelative(iso, now)}
    </time>
  )
}
