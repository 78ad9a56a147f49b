import type uPlot from 'uplot'

/** Line 0, 1, 2 ... (attempts, compared runs): distinct enough on white, in the dashboard's palette. */
const SERIES_COLOURS = ['#2f6fde', '#ee4c2c', '#1f8a4c', '#b7791f', '#8250df', '#13807c', '#c9372c', '#6b7480']

/** The colour of a chart's line `index`, so a legend or table beside it can match. */
export const seriesColour = (index: number) => SERIES_COLOURS[index % SERIES_COLOURS.length]

export interface Point {
  x: number
  y: number
}

export interface ChartSeries {
  label: string
  points: Point[]
}

/**
 * Lines of different lengths on one x axis, as uPlot draws them: the union of every line's x,
 * ascending, and per line its y at each x or null (spanned over when drawn).
 */
export function alignSeries(series: ChartSeries[]): uPlot.AlignedData {
  if (series.length === 1) return [series[0].points.map((p) => p.x), series[0].points.map((p) => p.y)]
  const xs = [...new Set(series.flatMap((s) => s.points.map((p) => p.x)))].sort((a, b) => a - b)
  const column = new Map(xs.map((x, i) => [x, i]))
  const ys = series.map((s) => {
    const out: (number | null)[] = new Array<number | null>(xs.length).fill(null)
    for (const p of s.points) out[column.get(p.x)!] = p.y
    return out
  })
  return [xs, ...ys]
}
