import { describe, expect, it } from 'vitest'
import type { JobDetail, JobNode, Machine } from '../../lib/types'
import { jobDetail, jobNode, machine, progress } from '../../test/fixtures'
import {
  CONTROL_PLANE_HEIGHT,
  JOB_NODE_HEIGHT,
  JOB_NODE_WIDTH,
  MACHINE_WIDTH,
  defaultColumns,
  jobColour,
  layoutTopology,
  type JobNodeNode,
  type MachineNode,
  type TopologyInput,
  type TopologyLayout,
} from './layout'

const CONTROL_PLANE = { title: 'Control plane', detail: '' }

function gpuMachine(id: number, gpus: number, overrides: Partial<Machine> = {}): Machine {
  const base = machine({ id, name: `m${id}`, host: `10.0.0.${id}` })
  return {
    ...base,
    capabilities: {
      ...base.capabilities,
      gpu_count: gpus,
      gpus: Array.from({ length: gpus }, (_, index) => ({ index, name: 'A100', memory_mb: 40960 })),
    },
    current_load: { cpu_usage: 10, memory_usage: 20, gpu_usage: Array.from({ length: gpus }, () => 0) },
    ...overrides,
  }
}

function node(jobId: number, rank: number, machineId: number, nproc = 2, gpus: number[] = []): JobNode {
  return jobNode({
    id: jobId * 100 + rank,
    node_rank: rank,
    machine: { id: machineId, name: `m${machineId}`, host: `10.0.0.${machineId}` },
    nproc,
    rank_start: rank * nproc,
    rank_end: rank * nproc + nproc - 1,
    gpus,
  })
}

function job(id: number, machineIds: number[], overrides: Partial<JobDetail> = {}): JobDetail {
  return jobDetail({ id, name: `job-${id}`, nodes: machineIds.map((m, rank) => node(id, rank, m)), ...overrides })
}

const machineNodes = (layout: TopologyLayout) => layout.nodes.filter((n): n is MachineNode => n.type === 'machine')
const jobNodes = (layout: TopologyLayout) => layout.nodes.filter((n): n is JobNodeNode => n.type === 'jobNode')
const byId = (layout: TopologyLayout, id: string) => layout.nodes.find((n) => n.id === id)!
const positions = (layout: TopologyLayout) => layout.nodes.map((n) => [n.id, n.position, n.width, n.height])

describe('layoutTopology', () => {
  it('puts the control plane above a grid of machines in id order', () => {
    const layout = layoutTopology({
      machines: [3, 1, 2].map((id) => gpuMachine(id, 0)),
      jobs: [],
      controlPlane: CONTROL_PLANE,
      columns: 2,
    })
    const [m1, m2, m3] = machineNodes(layout)
    expect([m1.id, m2.id, m3.id]).toEqual(['machine-1', 'machine-2', 'machine-3'])
    // Two columns: m1 m2 on the first row, m3 under m1.
    expect(m1.position.y).toBe(m2.position.y)
    expect(m2.position.x).toBeGreaterThan(m1.position.x + MACHINE_WIDTH)
    expect(m3.position.x).toBe(m1.position.x)
    expect(m3.position.y).toBeGreaterThan(m1.position.y + m1.height!)
    const controlPlane = byId(layout, 'control-plane')
    expect(controlPlane.position.y + CONTROL_PLANE_HEIGHT).toBeLessThan(m1.position.y)
    // Centred over the grid.
    const gridCentre = (m2.position.x + MACHINE_WIDTH) / 2
    expect(controlPlane.position.x + controlPlane.width! / 2).toBe(gridCentre)
    // One agent link per machine.
    expect(layout.edges.filter((e) => e.source === 'control-plane').map((e) => e.target)).toEqual([
      'machine-1',
      'machine-2',
      'machine-3',
    ])
  })

  it("draws every job node inside its machine, with its job's rank range, and marks node 0 as master", () => {
    const layout = layoutTopology({
      machines: [gpuMachine(1, 0), gpuMachine(2, 0)],
      jobs: [job(5, [1, 2])],
      controlPlane: CONTROL_PLANE,
    })
    const [n0, n1] = jobNodes(layout)
    expect(n0.parentId).toBe('machine-1')
    expect(n1.parentId).toBe('machine-2')
    for (const n of [n0, n1]) {
      const parent = byId(layout, n.parentId!)
      // Positions of children are relative to their machine and fit inside it.
      expect(n.position.x).toBeGreaterThan(0)
      expect(n.position.x + JOB_NODE_WIDTH).toBeLessThan(parent.width!)
      expect(n.position.y + JOB_NODE_HEIGHT).toBeLessThanOrEqual(parent.height!)
    }
    expect([n0.data.node.rank_start, n0.data.node.rank_end, n1.data.node.rank_start, n1.data.node.rank_end]).toEqual([0, 1, 2, 3])
    expect([n0.data.isMaster, n1.data.isMaster]).toEqual([true, false])
    expect(n0.data.nodeCount).toBe(2)
    // Children come after their parents, as React Flow needs.
    const index = (id: string) => layout.nodes.findIndex((n) => n.id === id)
    expect(index(n1.id)).toBeGreaterThan(index('machine-2'))
  })

  it("links a job's master to each of its other nodes, in the job's colour", () => {
    const layout = layoutTopology({
      machines: [1, 2, 3].map((id) => gpuMachine(id, 0)),
      jobs: [job(5, [2, 1, 3])],
    })
    const links = layout.edges.filter((e) => e.className === 'link-job')
    expect(links.map((e) => [e.source, e.target])).toEqual([
      ['job-5-node-0', 'job-5-node-1'],
      ['job-5-node-0', 'job-5-node-2'],
    ])
    expect(links.every((e) => e.style?.stroke === jobColour(5) && e.animated)).toBe(true)
    // No control plane asked for: no agent links.
    expect(layout.edges.filter((e) => e.source === 'control-plane')).toEqual([])
  })

  it('stacks the nodes of several jobs on one machine in job order and keeps a slot for an idle one', () => {
    const layout = layoutTopology({
      machines: [gpuMachine(1, 0), gpuMachine(2, 0)],
      jobs: [job(9, [1]), job(4, [1])],
      columns: 2,
    })
    const [first, second] = jobNodes(layout)
    expect([first.id, second.id]).toEqual(['job-4-node-0', 'job-9-node-0'])
    expect(second.position.y).toBeGreaterThanOrEqual(first.position.y + JOB_NODE_HEIGHT)
    const [m1, m2] = machineNodes(layout)
    expect(m2.data.empty).toBe(true)
    expect(m1.data.empty).toBe(false)
    // A row is as tall as its tallest machine.
    expect(m2.height).toBe(m1.height)
  })

  it('keeps every position while load, statuses and progress stream in', () => {
    const input: TopologyInput = {
      machines: [gpuMachine(1, 4), gpuMachine(2, 4)],
      jobs: [job(5, [1, 2])],
      controlPlane: CONTROL_PLANE,
    }
    const before = layoutTopology(input)
    const after = layoutTopology({
      ...input,
      machines: input.machines.map((m) => ({
        ...m,
        status: 'offline',
        current_load: { cpu_usage: 99, memory_usage: 98, gpu_usage: [100, 100, 100, 100] },
        usage: [{ project: 'nlp', gpus: 1, processes: 1 }],
      })),
      jobs: [
        job(5, [1, 2], {
          status: 'recovering',
          progress: progress({ step: 400, total_steps: 500, throughput: 1, loss: 0.1, eta_seconds: 1 }),
        }),
      ],
      controlPlane: { title: 'Control plane', detail: 'changed' },
    })
    expect(positions(after)).toEqual(positions(before))
    expect(after.structureKey).toBe(before.structureKey)
    expect(after.edges.map((e) => e.data!.points)).toEqual(before.edges.map((e) => e.data!.points))
  })

  it('keeps existing nodes where they are when a new job starts', () => {
    const machines = [1, 2, 3].map((id) => gpuMachine(id, 2))
    const before = layoutTopology({ machines, jobs: [job(5, [1, 2])], columns: 3 })
    const after = layoutTopology({ machines, jobs: [job(5, [1, 2]), job(6, [3, 2])], columns: 3 })
    for (const n of jobNodes(before)) expect(byId(after, n.id).position).toEqual(n.position)
    for (const m of machineNodes(before)) expect(byId(after, m.id).position).toEqual(m.position)
    expect(after.structureKey).not.toBe(before.structureKey)
  })

  it('never routes a link across a machine it does not join', () => {
    // 10 machines in 4 columns (3 rows), jobs spread across rows and columns in every direction.
    const machines = Array.from({ length: 10 }, (_, i) => gpuMachine(i + 1, i % 3 === 0 ? 8 : 0))
    const jobs = [job(1, [1, 4, 10, 6]), job(2, [7, 2, 9]), job(3, [5, 5, 1]), job(4, [10, 3])]
    const layout = layoutTopology({ machines, jobs, controlPlane: CONTROL_PLANE, columns: 4 })
    const boxes = machineNodes(layout).map((m) => ({
      id: m.id,
      x1: m.position.x,
      y1: m.position.y,
      x2: m.position.x + m.width!,
      y2: m.position.y + m.height!,
    }))
    const parentOf = (id: string) => (id === 'control-plane' ? id : id.startsWith('machine') ? id : byId(layout, id).parentId!)
    expect(layout.edges.length).toBe(10 + 3 + 2 + 2 + 1)
    for (const edge of layout.edges) {
      const ends = new Set([parentOf(edge.source), parentOf(edge.target)])
      const points = edge.data!.points
      for (let i = 1; i < points.length; i++) {
        const [a, b] = [points[i - 1], points[i]]
        // Every segment is horizontal or vertical.
        expect(a.x === b.x || a.y === b.y).toBe(true)
        for (const box of boxes) {
          if (ends.has(box.id)) continue
          const crosses =
            Math.max(a.x, b.x) > box.x1 && Math.min(a.x, b.x) < box.x2 && Math.max(a.y, b.y) > box.y1 && Math.min(a.y, b.y) < box.y2
          expect(crosses, `${edge.id} crosses ${box.id}`).toBe(false)
        }
      }
    }
    // Everything drawn lies inside the bounds the view fits to.
    const { x, y, width, height } = layout.bounds
    for (const p of layout.edges.flatMap((e) => e.data!.points)) {
      expect(p.x >= x && p.x <= x + width && p.y >= y && p.y <= y + height).toBe(true)
    }
  })

  it('draws a node whose machine was removed on a placeholder named after it', () => {
    const gone = job(5, [1, 2])
    gone.nodes[1] = { ...gone.nodes[1], machine: { id: null, name: 'old-box', host: '10.9.9.9' } }
    const layout = layoutTopology({ machines: [gpuMachine(1, 0)], jobs: [gone] })
    const placeholder = byId(layout, 'machine-removed-old-box') as MachineNode
    expect(placeholder.data.removed).toBe(true)
    expect(placeholder.data.machine.name).toBe('old-box')
    expect(byId(layout, 'job-5-node-1').parentId).toBe('machine-removed-old-box')
  })

  it("shows other projects' usage as counts and colours the GPUs a shown job holds", () => {
    const usage = [
      { project: 'default', gpus: 2, processes: 2 },
      { project: 'nlp', gpus: 1, processes: 3 },
    ]
    const withGpus = job(5, [1])
    withGpus.nodes[0] = { ...withGpus.nodes[0], gpus: [0, 2] }
    const layout = layoutTopology({ machines: [gpuMachine(1, 4, { usage })], jobs: [withGpus] })
    const [m] = machineNodes(layout)
    expect(m.data.otherUsage).toEqual([{ project: 'nlp', gpus: 1, processes: 3 }])
    expect(m.data.heldGpus).toEqual({ 0: jobColour(5), 2: jobColour(5) })
  })

  it("draws only a job's newest attempt", () => {
    const first = job(5, [1, 2])
    const recovered = { ...first, nodes: [...first.nodes.map((n) => ({ ...n, attempt: 0 })), { ...node(5, 0, 2), id: 900, attempt: 1 }] }
    const layout = layoutTopology({ machines: [gpuMachine(1, 0), gpuMachine(2, 0)], jobs: [recovered] })
    expect(jobNodes(layout).map((n) => [n.id, n.parentId])).toEqual([['job-5-node-0', 'machine-2']])
  })

  it('lays out more columns than rows', () => {
    expect([1, 2, 3, 4, 6, 9, 16, 64].map(defaultColumns)).toEqual([1, 2, 3, 3, 4, 4, 6, 11])
  })
})
