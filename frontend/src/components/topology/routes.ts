/**
 * Orthogonal routes for the topology's links. Machines sit in a grid with empty gaps between
 * columns and rows; a link leaves its node sideways into the nearest column gap, runs along gaps
 * only, and enters the other node from the side, so it never crosses a machine it does not join
 * (a straight line from a master to its third machine would pass over the second one's nodes).
 */

export interface Point {
  x: number
  y: number
}

export interface Grid {
  columns: number
  rowTops: number[]
  rowHeights: number[]
  machineWidth: number
  gapX: number
  gapY: number
}

/** A job node's box in flow coordinates, and the cell of the machine holding it. */
export interface NodeBox {
  x: number
  y: number
  width: number
  height: number
  column: number
  row: number
  machine: string
}

/** How far into the machine's padding a link between two nodes of one machine reaches. */
const SAME_MACHINE_REACH = 7

const columnLeft = (grid: Grid, column: number) => column * (grid.machineWidth + grid.gapX)
const gapLeftOf = (grid: Grid, column: number) => columnLeft(grid, column) - grid.gapX / 2
const gapRightOf = (grid: Grid, column: number) => columnLeft(grid, column) + grid.machineWidth + grid.gapX / 2
const gapAbove = (grid: Grid, row: number) => grid.rowTops[row] - grid.gapY / 2
const gapBelow = (grid: Grid, row: number) => grid.rowTops[row] + grid.rowHeights[row] + grid.gapY / 2

/** Drops points that repeat the previous one or lie on a straight line through their neighbours. */
function simplify(points: Point[]): Point[] {
  const unique = points.filter((p, i) => i === 0 || p.x !== points[i - 1].x || p.y !== points[i - 1].y)
  return unique.filter((p, i) => {
    if (i === 0 || i === unique.length - 1) return true
    const a = unique[i - 1]
    const b = unique[i + 1]
    return !((a.x === p.x && p.x === b.x) || (a.y === p.y && p.y === b.y))
  })
}

/** Agent links run this far outside a machine's left edge and above its top: clear of the job
 * links, which keep to the middle of the gaps (within a few lanes of it). */
const AGENT_OFFSET = 14

/** From the control plane's bottom to a machine's top: down into the gap above the first row,
 * along it, down the column gap beside the machine to just above it, and in from the top. */
export function agentLinkRoute(grid: Grid, from: Point, column: number, row: number): Point[] {
  const centre = columnLeft(grid, column) + grid.machineWidth / 2
  const first = gapAbove(grid, 0)
  if (row === 0) {
    return simplify([from, { x: from.x, y: first }, { x: centre, y: first }, { x: centre, y: grid.rowTops[0] }])
  }
  const side = columnLeft(grid, column) - AGENT_OFFSET
  const above = grid.rowTops[row] - AGENT_OFFSET
  return simplify([
    from,
    { x: from.x, y: first },
    { x: side, y: first },
    { x: side, y: above },
    { x: centre, y: above },
    { x: centre, y: grid.rowTops[row] },
  ])
}

/**
 * From one job node to another. `lane` shifts the gap segments sideways so that links of
 * different jobs running through one gap stay apart; the links of one job share theirs.
 */
export function jobLinkRoute(grid: Grid, from: NodeBox, to: NodeBox, lane = 0): Point[] {
  const fromY = from.y + from.height / 2
  const toY = to.y + to.height / 2
  if (from.machine === to.machine) {
    const right = from.x + from.width
    const reach = right + SAME_MACHINE_REACH
    return [
      { x: right, y: fromY },
      { x: reach, y: fromY },
      { x: reach, y: toY },
      { x: to.x + to.width, y: toY },
    ]
  }
  // Leave on the side facing the other node (right when they share a column), enter on its side.
  const leftward = to.column < from.column
  const exitX = leftward ? from.x : from.x + from.width
  const gapFrom = (leftward ? gapLeftOf(grid, from.column) : gapRightOf(grid, from.column)) + lane
  const towardsRight = to.column > from.column
  const entryX = towardsRight ? to.x : to.x + to.width
  const gapTo = (towardsRight ? gapLeftOf(grid, to.column) : gapRightOf(grid, to.column)) + lane
  if (gapFrom === gapTo) {
    return simplify([
      { x: exitX, y: fromY },
      { x: gapFrom, y: fromY },
      { x: gapFrom, y: toY },
      { x: entryX, y: toY },
    ])
  }
  // Between the two column gaps, along a row gap next to the other node's row.
  const channel = (from.row < to.row ? gapAbove(grid, to.row) : gapBelow(grid, to.row)) + lane
  return simplify([
    { x: exitX, y: fromY },
    { x: gapFrom, y: fromY },
    { x: gapFrom, y: channel },
    { x: gapTo, y: channel },
    { x: gapTo, y: toY },
    { x: entryX, y: toY },
  ])
}

/** An SVG path through the points with rounded corners (radius shrunk on short segments). */
export function roundedPath(points: Point[], radius = 8): string {
  if (points.length === 0) return ''
  let d = `M ${points[0].x} ${points[0].y}`
  for (let i = 1; i < points.length - 1; i++) {
    const [a, p, b] = [points[i - 1], points[i], points[i + 1]]
    const r = Math.min(radius, Math.hypot(p.x - a.x, p.y - a.y) / 2, Math.hypot(b.x - p.x, b.y - p.y) / 2)
    const towards = (q: Point, length: number) => {
      const l = Math.hypot(q.x - p.x, q.y - p.y) || 1
      return { x: p.x + ((q.x - p.x) / l) * length, y: p.y + ((q.y - p.y) / l) * length }
    }
    const before = towards(a, r)
    const after = towards(b, r)
    d += ` L ${before.x} ${before.y} Q ${p.x} ${p.y} ${after.x} ${after.y}`
  }
  const last = points[points.length - 1]
  return `${d} L ${last.x} ${last.y}`
}
