import type { Trial } from '../api/sweeps'

interface Axis {
  name: string
  /** Where a value sits on the axis, 0 (bottom) to 1 (top); null when the trial has none. */
  place: (value: unknown) => number | null
  label: (value: number) => string
}

const WIDTH = 720
const HEIGHT = 240
const PAD = { top: 24, bottom: 28, side: 60 }

/** An axis for each hyperparameter (log for a loguniform one, evenly spaced values for a list) and the metric. */
function axesOf(trials: Trial[], space: Record<string, Record<string, unknown>>, metric: string): Axis[] {
  const axes: Axis[] = Object.entries(space).map(([name, entry]) => {
    const [kind, values] = Object.entries(entry)[0] ?? ['choice', []]
    if (kind === 'choice' || kind === 'grid') {
      const list = (values as unknown[]).map(String)
      return {
        name,
        place: (v) => (list.length < 2 ? 0.5 : list.indexOf(String(v)) / (list.length - 1)),
        label: (p) => list[Math.round(p * (list.length - 1))] ?? '',
      }
    }
    const [low, high] = values as [number, number]
    const log = kind === 'loguniform'
    const f = (x: number) => (log ? Math.log10(x) : x)
    return {
      name,
      place: (v) => (typeof v === 'number' ? (f(v) - f(low)) / (f(high) - f(low) || 1) : null),
      label: (p) => {
        const x = log ? 10 ** (f(low) + p * (f(high) - f(low))) : low + p * (high - low)
        return x.toPrecision(2)
      },
    }
  })
  const measured = trials.map((t) => t.value).filter((v): v is number => v != null)
  const [low, high] = [Math.min(...measured), Math.max(...measured)]
  axes.push({
    name: metric,
    place: (v) => (typeof v === 'number' ? (high > low ? (v - low) / (high - low) : 0.5) : null),
    label: (p) => (measured.length ? (low + p * (high - low)).toPrecision(3) : ''),
  })
  return axes
}

/** Hyperparameters against the metric, one line a trial: pruned ones faded, the best one bold. */
export function ParallelCoordinates({ trials, space, metric, best }: {
  trials: Trial[]
  space: Record<string, Record<string, unknown>>
  metric: string
  best: number | null
}) {
  const axes = axesOf(trials, space, metric)
  const x = (i: number) => PAD.side + (i * (WIDTH - 2 * PAD.side)) / Math.max(1, axes.length - 1)
  const y = (p: number) => PAD.top + (1 - p) * (HEIGHT - PAD.top - PAD.bottom)
  return (
    <svg viewBox={`0 0 ${WIDTH} ${HEIGHT}`} role="img" aria-label="hyperparameters against the metric" className="parallel">
      {axes.map((axis, i) => (
        <g key={axis.name}>
          <line x1={x(i)} x2={x(i)} y1={y(0)} y2={y(1)} stroke="#9aa3ad" />
          <text x={x(i)} y={HEIGHT - 8} textAnchor="middle" className="axis-name">
            {axis.name}
          </text>
          <text x={x(i) + 4} y={y(1) - 4} className="axis-tick">
            {axis.label(1)}
          </text>
          <text x={x(i) + 4} y={y(0) + 12} className="axis-tick">
            {axis.label(0)}
          </text>
        </g>
      ))}
      {trials.map((t) => {
        const points = axes.map((axis, i) => {
          const p = axis.place(i === axes.length - 1 ? t.value : t.params[axis.name])
          return p == null ? null : `${x(i)},${y(p)}`
        })
        if (points.some((p) => p == null)) return null
        const isBest = t.number === best
        return (
          <polyline
            key={t.number}
            points={points.join(' ')}
            fill="none"
            stroke={isBest ? '#1f8a4c' : t.status === 'pruned' ? '#9aa3ad' : '#2f6fde'}
            strokeWidth={isBest ? 3 : 1.5}
            opacity={t.status === 'pruned' ? 0.35 : 0.9}
          >
            <title>{`trial ${t.number} (${t.status}): ${metric} ${t.value ?? '—'}`}</title>
          </polyline>
        )
      })}
    </svg>
  )
}
