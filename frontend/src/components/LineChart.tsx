import { useEffect, useRef } from 'react'
import type uPlot from 'uplot'
import 'uplot/dist/uPlot.min.css'
import { alignSeries, seriesColour, type ChartSeries } from './chart-data'

/** A dashed vertical line at step `x`, named at the top of the plot (an elastic job's resize). */
export interface ChartMark {
  x: number
  label: string
}

interface LineChartProps {
  series: ChartSeries[]
  /** Names the chart (its aria-label is "<label> chart") and its empty state. */
  label: string
  height?: number
  formatY?: (y: number) => string
  /** Keeps every chart with the same key on one cursor. */
  syncKey?: string
  /** Dashed vertical lines across the plot, each with its label at the top. */
  marks?: ChartMark[]
  /** The x values are Unix seconds: a time axis (dates and hours) instead of steps. */
  xTime?: boolean
}

const NO_MARKS: ChartMark[] = []

/**
 * uPlot needs matchMedia and a 2D canvas (it reads the pixel ratio as it loads); happy-dom, where the
 * unit tests run, has neither, and there the chart is left out. Hence uPlot is imported lazily.
 */
const canDraw = (() => {
  let result: boolean | undefined
  return () => {
    if (result === undefined) {
      result = typeof window.matchMedia === 'function' && !!document.createElement('canvas').getContext('2d')
    }
    return result
  }
})()

/**
 * A zoomable canvas line chart (uPlot): drag across to zoom in, double-click to zoom out. Data
 * arriving while zoomed keeps the zoom. Updates are drawn at most once per frame, so a stream of
 * ten batches a second costs ten redraws, not a re-mount.
 */
export function LineChart({
  series,
  label,
  height = 200,
  formatY = (y) => y.toPrecision(3),
  syncKey,
  marks = NO_MARKS,
  xTime = false,
}: LineChartProps) {
  const holder = useRef<HTMLDivElement>(null)
  const plot = useRef<uPlot | null>(null)
  const zoomed = useRef(false)
  const frame = useRef<number | null>(null)
  const formatRef = useRef(formatY)
  // Read by the chart's draw hook: new marks redraw the chart, they do not rebuild it.
  const marksRef = useRef(marks)
  // The newest data, for a chart that mounts after uPlot has loaded.
  const latest = useRef(series)
  useEffect(() => {
    formatRef.current = formatY
    latest.current = series
  })
  const labels = series.map((s) => s.label).join('\u0000')
  const empty = series.every((s) => s.points.length === 0)

  // One uPlot per set of series; rebuilt only when an attempt appears.
  useEffect(() => {
    const el = holder.current
    if (!el || empty || !canDraw()) return
    let cancelled = false
    let teardown = () => {}
    void import('uplot').then(({ default: UPlot }) => {
      if (cancelled) return
      const data = alignSeries(latest.current)
      const names = latest.current.map((s) => s.label)
      teardown = mountChart(UPlot, { el, height, syncKey, xTime, labels: names, data, format: formatRef, marks: marksRef, zoomed, plot })
    })
    return () => {
      cancelled = true
      teardown()
    }
    // Rebuilt on new series names only; `series` data goes through setData below.
  }, [labels, empty, height, syncKey, xTime])

  useEffect(() => {
    if (!plot.current) return
    if (frame.current !== null) cancelAnimationFrame(frame.current)
    frame.current = requestAnimationFrame(() => {
      frame.current = null
      plot.current?.setData(alignSeries(series), !zoomed.current)
    })
  }, [series])

  const markKey = marks.map((m) => `${m.x}\u0000${m.label}`).join('\u0001')
  useEffect(() => {
    marksRef.current = marks
    plot.current?.redraw(false, false)
    // Redrawn when what the marks say changes, not on each new (equal) array.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [markKey])

  useEffect(() => () => {
    if (frame.current !== null) cancelAnimationFrame(frame.current)
  }, [])

  if (empty) {
    return (
      <div className="chart chart-empty" style={{ height }}>
        No {label.toLowerCase()} data yet
      </div>
    )
  }
  return (
    <div
      className="chart chart-uplot"
      ref={holder}
      role="img"
      aria-label={`${label} chart`}
      title="Drag across to zoom in, double-click to zoom out"
      style={{ minHeight: height }}
    />
  )
}

interface Mount {
  el: HTMLDivElement
  height: number
  syncKey: string | undefined
  xTime: boolean
  labels: string[]
  data: uPlot.AlignedData
  format: { current: (y: number) => string }
  marks: { current: ChartMark[] }
  zoomed: { current: boolean }
  plot: { current: uPlot | null }
}

const MARK_COLOUR = '#6b7480'

/** The marks inside the plot's x range: a dashed line each, its label at the top beside it (on a
 * second or third row where it would run into the one before). Canvas pixels throughout. */
function drawMarks(u: uPlot, marks: ChartMark[], ratio: number): void {
  if (!marks.length) return
  const { left, top, width, height } = u.bbox
  const ctx = u.ctx
  const rowHeight = 13 * ratio
  const rowsEnd: number[] = []
  ctx.save()
  ctx.beginPath()
  ctx.rect(left, top, width, height)
  ctx.clip()
  ctx.font = `${10 * ratio}px system-ui, sans-serif`
  ctx.textBaseline = 'top'
  ctx.lineWidth = ratio
  for (const mark of [...marks].sort((a, b) => a.x - b.x)) {
    const x = Math.round(u.valToPos(mark.x, 'x', true))
    if (!Number.isFinite(x) || x < left || x > left + width) continue
    ctx.strokeStyle = MARK_COLOUR
    ctx.setLineDash([4 * ratio, 3 * ratio])
    ctx.beginPath()
    ctx.moveTo(x, top)
    ctx.lineTo(x, top + height)
    ctx.stroke()
    ctx.setLineDash([])
    const textWidth = ctx.measureText(mark.label).width
    // Right of the line, or left of it where it would leave the plot.
    const start = x + 3 * ratio + textWidth <= left + width ? x + 3 * ratio : x - 3 * ratio - textWidth
    let row = rowsEnd.findIndex((end) => start > end)
    if (row === -1) row = Math.min(rowsEnd.length, 2)
    rowsEnd[row] = start + textWidth + 4 * ratio
    ctx.fillStyle = 'rgba(255, 255, 255, 0.85)'
    ctx.fillRect(start - ratio, top + 2 * ratio + row * rowHeight, textWidth + 2 * ratio, rowHeight - ratio)
    ctx.fillStyle = MARK_COLOUR
    ctx.fillText(mark.label, start, top + 2 * ratio + row * rowHeight)
  }
  ctx.restore()
}

/** Draws a uPlot into `el`; returns its teardown. */
function mountChart(UPlot: typeof uPlot, { el, height, syncKey, xTime, labels, data, format, marks, zoomed, plot }: Mount): () => void {
  const options: uPlot.Options = {
    width: Math.max(200, el.clientWidth),
    height,
    legend: { show: true, live: true },
    cursor: { drag: { x: true, y: false, setScale: true }, sync: syncKey ? { key: syncKey } : undefined },
    scales: { x: { time: xTime } },
    axes: [
      { stroke: '#6b7480', grid: { stroke: '#eef0f3' }, ticks: { stroke: '#dde1e6' }, font: '11px system-ui' },
      {
        stroke: '#6b7480',
        grid: { stroke: '#eef0f3' },
        ticks: { stroke: '#dde1e6' },
        font: '11px system-ui',
        size: 56,
      },
    ],
    series: [
      { label: xTime ? 'time' : 'step' },
      ...labels.map((label, i) => ({
        label,
        stroke: seriesColour(i),
        width: 1.5,
        spanGaps: true,
        // Over time (buckets) each point is a value of its own: dots; along steps, a plain line.
        points: { show: xTime, size: 5 },
        value: (_u: uPlot, v: number | null) => (v == null ? '—' : format.current(v)),
      })),
    ],
    hooks: {
      setSelect: [() => (zoomed.current = true)],
      draw: [(u: uPlot) => drawMarks(u, marks.current, UPlot.pxRatio)],
    },
  }
  const u = new UPlot(options, data, el)
  const unzoom = () => (zoomed.current = false)
  u.over.addEventListener('dblclick', unzoom)
  plot.current = u
  const resize = new ResizeObserver(() => u.setSize({ width: Math.max(200, el.clientWidth), height }))
  resize.observe(el)
  return () => {
    resize.disconnect()
    u.over.removeEventListener('dblclick', unzoom)
    u.destroy()
    plot.current = null
    zoomed.current = false
  }
}
