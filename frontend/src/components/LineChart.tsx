import { useMemo } from 'react'

export interface Point {
  x: number
  y: number
}

interface LineChartProps {
  points: Point[]
  label: string
  width?: number
  height?: number
  /** Formats the y-axis bounds. */
  formatY?: (y: number) => string
  /** Most points drawn; longer series are thinned evenly (the last point is always kept). */
  maxPoints?: number
}

function thin(points: Point[], maxPoints: number): Point[] {
  if (points.length <= maxPoints) return points
  const stride = points.length / maxPoints
  const out: Point[] = []
  for (let i = 0; i < maxPoints - 1; i++) out.push(points[Math.floor(i * stride)])
  out.push(points[points.length - 1])
  return out
}

const PAD = { top: 8, right: 8, bottom: 18, left: 48 }

/** A dependency-free SVG line chart: enough for loss and throughput curves. */
export function LineChart({
  points,
  label,
  width = 480,
  height = 160,
  formatY = (y) => y.toPrecision(3),
  maxPoints = 800,
}: LineChartProps) {
  const drawn = useMemo(() => thin(points, maxPoints), [points, maxPoints])

  if (drawn.length === 0) {
    return (
      <div className="chart chart-empty" style={{ height }}>
        No {label.toLowerCase()} data yet
      </div>
    )
  }

  let minX = Infinity
  let maxX = -Infinity
  let minY = Infinity
  let maxY = -Infinity
  for (const p of drawn) {
    minX = Math.min(minX, p.x)
    maxX = Math.max(maxX, p.x)
    minY = Math.min(minY, p.y)
    maxY = Math.max(maxY, p.y)
  }
  if (maxX === minX) maxX = minX + 1
  if (maxY === minY) {
    maxY += Math.abs(maxY) * 0.05 || 1
    minY -= Math.abs(minY) * 0.05 || 1
  }
  const plotW = width - PAD.left - PAD.right
  const plotH = height - PAD.top - PAD.bottom
  const sx = (x: number) => PAD.left + ((x - minX) / (maxX - minX)) * plotW
  const sy = (y: number) => PAD.top + (1 - (y - minY) / (maxY - minY)) * plotH
  const path = drawn.map((p, i) => `${i ? 'L' : 'M'}${sx(p.x).toFixed(1)},${sy(p.y).toFixed(1)}`).join('')

  return (
    <svg className="chart" viewBox={`0 0 ${width} ${height}`} role="img" aria-label={`${label} chart`}>
      <line className="chart-axis" x1={PAD.left} y1={PAD.top} x2={PAD.left} y2={PAD.top + plotH} />
      <line className="chart-axis" x1={PAD.left} y1={PAD.top + plotH} x2={PAD.left + plotW} y2={PAD.top + plotH} />
      <text className="chart-tick" x={PAD.left - 4} y={PAD.top + 4} textAnchor="end">
        {formatY(maxY)}
      </text>
      <text className="chart-tick" x={PAD.left - 4} y={PAD.top + plotH} textAnchor="end">
        {formatY(minY)}
      </text>
      <text className="chart-tick" x={PAD.left} y={height - 4}>
        {minX}
      </text>
      <text className="chart-tick" x={PAD.left + plotW} y={height - 4} textAnchor="end">
        step {maxX}
      </text>
      <path className="chart-line" d={path} />
    </svg>
  )
}
