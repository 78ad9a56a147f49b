import type { Edge, Node, NodeHandle, Position } from '@xyflow/react'
import type { JobDetail, JobNode, Machine, MachineUsage } from '../../lib/types'
import { agentLinkRoute, jobLinkRoute, type Grid, type NodeBox, type Point } from './routes'

/**
 * Where everything on the topology graph goes. A pure function of the machines and jobs: positions
 * depend only on which machines and job nodes exist (ids, GPU counts), never on load, progress or
 * status, so a graph fed by the stream does not move while it updates.
 *
 *            [ control plane ]
 *      ┌ machine ┐  ┌ machine ┐  ┌ machine ┐     machines in a grid, in id order
 *      │ header  │  │ header  │  │ header  │     (name, status, load, one badge per GPU)
 *      │ [node]──┼──┼─[node]  │  │ (idle)  │     a job's nodes inside their machines, in job id
 *      └─────────┘  └─────────┘  └─────────┘     then node rank order; links from the master
 *
 * Links are routed (routes.ts) through the gaps between machines, never across one.
 */

export const MACHINE_WIDTH = 300
export const MACHINE_PADDING = 12
/** Name and status, address and size, CPU and memory bars, other projects' usage. */
export const MACHINE_HEADER_HEIGHT = 104
export const GPUS_PER_ROW = 4
export const GPU_ROW_HEIGHT = 26
export const JOB_NODE_WIDTH = MACHINE_WIDTH - 2 * MACHINE_PADDING
export const JOB_NODE_HEIGHT = 54
export const SLOT_GAP = 8
export const GAP_X = 64
export const GAP_Y = 64
export const CONTROL_PLANE_WIDTH = 360
export const CONTROL_PLANE_HEIGHT = 64
/** Room between the control plane and the first row of machines. */
export const CONTROL_PLANE_GAP = 72

/** One colour per job, picked by id, so a job keeps its colour everywhere it is drawn (none of
 * them a status colour). */
export const JOB_COLOURS = ['#7c3aed', '#db2777', '#0891b2', '#ea580c', '#4f46e5', '#65a30d', '#c026d3', '#0f766e']
/** Parallel links of different jobs in one gap sit this far apart. */
export const LANE_SPACING = 5

export const jobColour = (jobId: number): string => JOB_COLOURS[jobId % JOB_COLOURS.length]

export interface ControlPlaneData extends Record<string, unknown> {
  title: string
  detail: string
}

export interface MachineNodeData extends Record<string, unknown> {
  machine: Machine
  /** Removed from the cluster (a job node still names it): drawn from what the node knows. */
  removed: boolean
  /** GPU index -> colour of the shown job holding it. */
  heldGpus: Record<number, string>
  /** Projects using the machine whose jobs are not on the graph (not visible to this user, or
   * not drawn): counts only. */
  otherUsage: MachineUsage[]
  /** No job node drawn inside: shows an "idle" placeholder in the slot kept for one. */
  empty: boolean
  /** Height of the header (everything above the job nodes). */
  headerHeight: number
}

export interface JobNodeData extends Record<string, unknown> {
  job: Pick<JobDetail, 'id' | 'name' | 'project' | 'status' | 'master_addr' | 'master_port' | 'progress'>
  node: JobNode
  nodeCount: number
  isMaster: boolean
  colour: string
  /** Drawn as a link to the job's page (off on the job's own page). */
  linked: boolean
}

export type ControlPlaneNode = Node<ControlPlaneData, 'controlPlane'>
export type MachineNode = Node<MachineNodeData, 'machine'>
export type JobNodeNode = Node<JobNodeData, 'jobNode'>
export type TopologyNode = ControlPlaneNode | MachineNode | JobNodeNode

export interface LinkData extends Record<string, unknown> {
  /** The link's corners, in flow coordinates, first at its source. */
  points: Point[]
}

export type TopologyEdge = Edge<LinkData, 'routed'>

export interface TopologyInput {
  machines: Machine[]
  /** The jobs to draw with their nodes (their current attempt's). */
  jobs: JobDetail[]
  controlPlane?: ControlPlaneData
  /** Machines per row; by default about 1.6 times as many columns as rows. */
  columns?: number
  linkJobs?: boolean
}

export interface TopologyLayout {
  nodes: TopologyNode[]
  edges: TopologyEdge[]
  /** Everything drawn, links included (a link may run below the last row or left of the grid). */
  bounds: { x: number; y: number; width: number; height: number }
  /** Changes only when something is added or removed: the graph refits its view on it. */
  structureKey: string
}

/**
 * Every node's two anchors, given up front: links draw their own routes and only need React
 * Flow to accept them, which it then does before (and without) measuring a node.
 */
function anchors(width: number, height: number): NodeHandle[] {
  return [
    { type: 'source', position: 'bottom' as Position, x: width / 2, y: height },
    { type: 'target', position: 'top' as Position, x: width / 2, y: 0 },
  ]
}

/** React Flow turns pointer events off on nodes that can be neither selected nor dragged; the
 * links inside machines and job nodes need them. */
const CLICKABLE = { pointerEvents: 'all' } as const

export const machineNodeId = (machine: { id: number | null; name: string }) =>
  machine.id == null ? `machine-removed-${machine.name}` : `machine-${machine.id}`

export const jobNodeId = (jobId: number, nodeRank: number) => `job-${jobId}-node-${nodeRank}`

export function defaultColumns(machineCount: number): number {
  if (machineCount <= 1) return 1
  return Math.min(machineCount, Math.max(2, Math.ceil(Math.sqrt(machineCount * 1.6))))
}

export function gpuRows(machine: Machine): number {
  const count = machine.capabilities.gpus?.length || machine.capabilities.gpu_count || 0
  return Math.max(1, Math.ceil(count / GPUS_PER_ROW))
}

/** A job's nodes of its newest attempt (a summary merged from the stream may be ahead of them). */
export function currentNodes(job: JobDetail): JobNode[] {
  if (job.nodes.length === 0) return []
  const attempt = Math.max(...job.nodes.map((n) => n.attempt))
  return job.nodes.filter((n) => n.attempt === attempt).sort((a, b) => a.node_rank - b.node_rank)
}

/** A machine the cluster no longer lists but a job node still names. */
function removedMachine(node: JobNode): Machine {
  return {
    id: -1,
    name: node.machine.name,
    host: node.machine.host,
    port: 0,
    status: 'offline',
    drained: false,
    capabilities: {},
    current_load: {},
    labels: {},
    agent_version: '',
    last_heartbeat: null,
    created_at: '',
    usage: [],
    volumes: [],
    declared_volumes: {},
    quarantined_at: null,
    quarantine_reason: '',
    quarantine_job: null,
    probation_until: null,
    health: {},
    measured_links: {},
    price_per_gpu_hour: null,
    price_per_machine_hour: null,
  }
}

interface Placed {
  job: JobDetail
  node: JobNode
  nodeCount: number
}

export function layoutTopology(input: TopologyInput): TopologyLayout {
  const linked = input.linkJobs ?? true

  // Machines in id order; removed ones a node still names go last, by name.
  const machines = input.machines.slice().sort((a, b) => a.id - b.id)
  const byId = new Map(machines.map((m) => [machineNodeId(m), m]))
  const removed = new Map<string, Machine>()
  const placed = new Map<string, Placed[]>()
  const jobs = input.jobs.slice().sort((a, b) => a.id - b.id)
  for (const job of jobs) {
    const nodes = currentNodes(job)
    for (const node of nodes) {
      const key = machineNodeId(node.machine)
      if (!byId.has(key) && !removed.has(key)) removed.set(key, removedMachine(node))
      const list = placed.get(key) ?? []
      list.push({ job, node, nodeCount: nodes.length })
      placed.set(key, list)
    }
  }
  const allMachines: [string, Machine, boolean][] = [
    ...machines.map((m): [string, Machine, boolean] => [machineNodeId(m), m, false]),
    ...[...removed.entries()]
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([key, m]): [string, Machine, boolean] => [key, m, true]),
  ]

  const columns = Math.max(1, input.columns ?? defaultColumns(allMachines.length))
  const heightOf = (key: string, machine: Machine) => {
    const slots = Math.max(1, placed.get(key)?.length ?? 0)
    return (
      MACHINE_HEADER_HEIGHT +
      gpuRows(machine) * GPU_ROW_HEIGHT +
      slots * (JOB_NODE_HEIGHT + SLOT_GAP) +
      MACHINE_PADDING -
      SLOT_GAP
    )
  }
  const slotTop = (machine: Machine) => MACHINE_HEADER_HEIGHT + gpuRows(machine) * GPU_ROW_HEIGHT

  const gridWidth = allMachines.length
    ? Math.min(columns, allMachines.length) * MACHINE_WIDTH + (Math.min(columns, allMachines.length) - 1) * GAP_X
    : MACHINE_WIDTH
  const hasControlPlane = input.controlPlane !== undefined
  const top = hasControlPlane ? CONTROL_PLANE_HEIGHT + CONTROL_PLANE_GAP : 0

  const nodes: TopologyNode[] = []
  const edges: TopologyEdge[] = []
  if (input.controlPlane) {
    nodes.push({
      id: 'control-plane',
      type: 'controlPlane',
      position: { x: (gridWidth - CONTROL_PLANE_WIDTH) / 2, y: 0 },
      width: CONTROL_PLANE_WIDTH,
      height: CONTROL_PLANE_HEIGHT,
      handles: anchors(CONTROL_PLANE_WIDTH, CONTROL_PLANE_HEIGHT),
      data: input.controlPlane,
      draggable: false,
      selectable: false,
    })
  }

  // Rows take the height of their tallest machine; every machine of a row is drawn that tall.
  const rowHeights: number[] = []
  allMachines.forEach(([key, machine], i) => {
    const row = Math.floor(i / columns)
    rowHeights[row] = Math.max(rowHeights[row] ?? 0, heightOf(key, machine))
  })
  const rowTops: number[] = []
  rowHeights.reduce((y, h, row) => {
    rowTops[row] = y
    return y + h + GAP_Y
  }, top)

  const grid: Grid = { columns, rowTops, rowHeights, machineWidth: MACHINE_WIDTH, gapX: GAP_X, gapY: GAP_Y }
  const controlPlaneBottom = { x: gridWidth / 2, y: CONTROL_PLANE_HEIGHT }
  const boxes = new Map<string, NodeBox>()
  const jobNodes: JobNodeNode[] = []
  allMachines.forEach(([key, machine, isRemoved], i) => {
    const row = Math.floor(i / columns)
    const column = i % columns
    const x = column * (MACHINE_WIDTH + GAP_X)
    const y = rowTops[row]
    const here = placed.get(key) ?? []
    const heldGpus: Record<number, string> = {}
    for (const { job, node } of here) for (const gpu of node.gpus ?? []) heldGpus[gpu] = jobColour(job.id)
    const shownProjects = new Set(here.map(({ job }) => job.project))
    nodes.push({
      id: key,
      type: 'machine',
      position: { x, y },
      width: MACHINE_WIDTH,
      height: rowHeights[row],
      handles: anchors(MACHINE_WIDTH, rowHeights[row]),
      style: CLICKABLE,
      data: {
        machine,
        removed: isRemoved,
        heldGpus,
        otherUsage: (machine.usage ?? []).filter((u) => !shownProjects.has(u.project)),
        empty: here.length === 0,
        headerHeight: slotTop(machine),
      },
      draggable: false,
      selectable: false,
    })
    if (hasControlPlane) {
      edges.push({
        id: `control-plane-${key}`,
        source: 'control-plane',
        target: key,
        type: 'routed',
        data: { points: agentLinkRoute(grid, controlPlaneBottom, column, row) },
        className: `link-agent link-agent-${machine.status}`,
        selectable: false,
        focusable: false,
      })
    }
    here.forEach(({ job, node, nodeCount }, slot) => {
      const position = { x: MACHINE_PADDING, y: slotTop(machine) + slot * (JOB_NODE_HEIGHT + SLOT_GAP) }
      const id = jobNodeId(job.id, node.node_rank)
      boxes.set(id, {
        x: x + position.x,
        y: y + position.y,
        width: JOB_NODE_WIDTH,
        height: JOB_NODE_HEIGHT,
        column,
        row,
        machine: key,
      })
      jobNodes.push({
        id,
        type: 'jobNode',
        parentId: key,
        extent: 'parent',
        position,
        width: JOB_NODE_WIDTH,
        height: JOB_NODE_HEIGHT,
        handles: anchors(JOB_NODE_WIDTH, JOB_NODE_HEIGHT),
        style: CLICKABLE,
        data: {
          job: {
            id: job.id,
            name: job.name,
            project: job.project,
            status: job.status,
            master_addr: job.master_addr,
            master_port: job.master_port,
            progress: job.progress,
          },
          node,
          nodeCount,
          // torchrun's rendezvous runs on node rank 0: master_addr is its machine.
          isMaster: node.node_rank === 0,
          colour: jobColour(job.id),
          linked,
        },
        draggable: false,
        selectable: false,
      })
    })
  })
  // Parents before their children, as React Flow wants them.
  nodes.push(...jobNodes)

  // Each job's links: from its master node to every other node, in a lane of its own.
  jobs.forEach((job, index) => {
    const from = boxes.get(jobNodeId(job.id, 0))
    if (!from) return
    const lane = ((index % 5) - 2) * LANE_SPACING
    for (const node of currentNodes(job)) {
      if (node.node_rank === 0) continue
      edges.push({
        id: `job-${job.id}-link-${node.node_rank}`,
        source: jobNodeId(job.id, 0),
        target: jobNodeId(job.id, node.node_rank),
        type: 'routed',
        data: { points: jobLinkRoute(grid, from, boxes.get(jobNodeId(job.id, node.node_rank))!, lane) },
        animated: job.status === 'running',
        className: 'link-job',
        style: { stroke: jobColour(job.id) },
        zIndex: 10,
        selectable: false,
        focusable: false,
      })
    }
  })

  const xs = [0, gridWidth, ...edges.flatMap((e) => e.data!.points.map((p) => p.x))]
  const ys = [0, rowTops.length ? rowTops[rowTops.length - 1] + rowHeights[rowHeights.length - 1] : top]
  for (const e of edges) for (const p of e.data!.points) ys.push(p.y)
  const bounds = {
    x: Math.min(...xs),
    y: Math.min(...ys),
    width: Math.max(...xs) - Math.min(...xs),
    height: Math.max(...ys) - Math.min(...ys),
  }
  const structureKey = [
    allMachines.map(([key, m]) => `${key}:${gpuRows(m)}`).join(','),
    jobNodes.map((n) => n.id).join(','),
  ].join('|')
  return { nodes, edges, bounds, structureKey }
}
