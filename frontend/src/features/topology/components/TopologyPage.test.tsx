import { act, fireEvent, screen, waitFor, within } from '@testing-library/react'
import userEvent from '@testing-library/user-event'
import { beforeAll, beforeEach, describe, expect, it, vi } from 'vitest'
import { ClusterStreamProvider } from '../../../app/ClusterStreamProvider'
import type { Machine } from '../../../lib/types'
import { FakeWebSocket } from '../../../test/fake-websocket'
import { jobDetail, jobSummary, machine } from '../../../test/fixtures'
import { json, mockFetch, type RecordedRequest } from '../../../test/http'
import { renderWithProviders } from '../../../test/render'
import { JobTopology } from '../../jobs/components/JobTopology'
import { TopologyPage } from './TopologyPage'

const alpha = machine({ id: 1, name: 'alpha', host: '10.0.0.11', status: 'busy' })
const beta = machine({ id: 2, name: 'beta', host: '10.0.0.12', status: 'busy' })
const gamma = machine({
  id: 3,
  name: 'gamma',
  host: '10.0.0.13',
  usage: [{ project: 'nlp', gpus: 2, processes: 4 }],
  capabilities: { cpu_count: 8, gpu_count: 2, gpus: [0, 1].map((index) => ({ index, name: 'L4', memory_mb: 23034 })) },
  current_load: { cpu_usage: 50, memory_usage: 30, gpu_usage: [87, 3] },
  volumes: [{ name: 'shared-data', path: '/mnt/nfs', exists: true, total_bytes: 2 * 1024 ** 4, free_bytes: 1024 ** 4, source: 'agent', storage_class: null }],
})

/** The flow node React Flow drew for an id: its box in flow coordinates. */
function drawnBox(id: string) {
  const element = document.querySelector<HTMLElement>(`.react-flow__node[data-id="${id}"]`)
  if (!element) throw new Error(`node ${id} is not drawn`)
  const [x, y] = element.style.transform.match(/-?[\d.]+/g)!.map(Number)
  return { element, x, y, width: parseFloat(element.style.width), height: parseFloat(element.style.height) }
}

function expectInside(inner: string, outer: string) {
  const a = drawnBox(inner)
  const b = drawnBox(outer)
  expect(a.x).toBeGreaterThan(b.x)
  expect(a.y).toBeGreaterThan(b.y)
  expect(a.x + a.width).toBeLessThan(b.x + b.width)
  expect(a.y + a.height).toBeLessThanOrEqual(b.y + b.height)
}

function renderTopology(machines: Machine[]): RecordedRequest[] {
  const requests = mockFetch({
    'GET /api/machines': () => json(machines),
    'GET /api/jobs': () => json([jobSummary({ id: 5, name: 'char-gpt' }), jobSummary({ id: 6, name: 'old', status: 'completed' })]),
    'GET /api/jobs/5': () => json(jobDetail()),
  })
  renderWithProviders(
    <ClusterStreamProvider>
      <TopologyPage />
    </ClusterStreamProvider>,
    { path: '/topology' },
  )
  return requests
}

// The graph is a lazy chunk (React Flow); load it once up front so no test waits on the import.
beforeAll(async () => {
  await import('../../../components/topology/TopologyGraph')
})

describe('topology page', () => {
  beforeEach(() => {
    vi.stubGlobal('WebSocket', FakeWebSocket)
  })

  it("draws every machine and a running job's nodes on their machines, master marked; Tab and Enter open the job", async () => {
    const requests = renderTopology([alpha, beta, gamma])

    const master = await screen.findByRole('link', { name: 'Job char-gpt (#5), node 0 of 2 on alpha, rank 0, running, master' })
    const other = screen.getByRole('link', { name: 'Job char-gpt (#5), node 1 of 2 on beta, rank 1, running' })
    expect(within(master).getByText('★ master')).toBeInTheDocument()
    expect(within(other).queryByText('★ master')).not.toBeInTheDocument()
    expectInside('job-5-node-0', 'machine-1')
    expectInside('job-5-node-1', 'machine-2')
    // The link between them, from the master.
    expect(document.querySelector('.react-flow__edge.link-job[data-id="job-5-link-1"]')).not.toBeNull()

    for (const name of ['alpha', 'beta', 'gamma']) {
      expect(screen.getByRole('link', { name: new RegExp(`^Machine ${name}, `) })).toBeInTheDocument()
    }
    // Another project's use of gamma: counts only. Its GPUs with their use.
    const gammaCard = drawnBox('machine-3').element
    expect(within(gammaCard).getByText('also in use: nlp: 2 GPUs, 4 procs')).toBeInTheDocument()
    expect(within(gammaCard).getByText('GPU0 87%')).toBeInTheDocument()
    expect(within(gammaCard).getByText('GPU1 3%')).toBeInTheDocument()
    expect(within(gammaCard).getByText("other projects' jobs only")).toBeInTheDocument()
    // Its volumes, by name (how full in the tooltip).
    expect(within(gammaCard).getByLabelText('Volumes: shared-data')).toHaveAttribute('title', 'shared-data /mnt/nfs · 50% full of 2.0 TiB')
    // A finished job is neither drawn nor fetched.
    expect(screen.queryByText('old')).not.toBeInTheDocument()
    expect(requests.some((r) => r.path === '/api/jobs/6')).toBe(false)

    // Keyboard: Tab reaches the node (past the machines' links), Enter opens the job.
    const user = userEvent.setup()
    for (let i = 0; i < 20 && document.activeElement !== master; i++) await user.tab()
    expect(master).toHaveFocus()
    await user.keyboard('{Enter}')
    expect(screen.getByTestId('location')).toHaveTextContent('/jobs/5')
  })

  it('opens a job when one of its nodes is clicked', async () => {
    renderTopology([alpha, beta])
    // A click alone: d3's pan handler cannot take happy-dom's mousedown (it has no view).
    fireEvent.click(await screen.findByRole('link', { name: /node 1 of 2 on beta/ }))
    expect(screen.getByTestId('location')).toHaveTextContent('/jobs/5')
  })

  it('recolours a machine in place when the cluster stream says it went offline', async () => {
    renderTopology([alpha, beta])
    await screen.findByRole('link', { name: /node 1 of 2 on beta/ })
    const before = ['machine-1', 'machine-2', 'job-5-node-0', 'job-5-node-1'].map((id) => drawnBox(id))
    expect(before[1].element.querySelector('.topo-machine')).toHaveClass('topo-machine-busy')

    const socket = await waitFor(() => FakeWebSocket.latest())
    expect(socket.target).toBe('/api/cluster/stream')
    act(() => {
      socket.open()
      socket.receive({
        type: 'machines',
        machines: [alpha, { ...beta, status: 'offline', current_load: { cpu_usage: 0, memory_usage: 0, gpu_usage: [] } }],
      })
    })

    await waitFor(() => expect(drawnBox('machine-2').element.querySelector('.topo-machine')).toHaveClass('topo-machine-offline'))
    expect(screen.getByRole('link', { name: 'Machine beta, offline' })).toBeInTheDocument()
    const after = ['machine-1', 'machine-2', 'job-5-node-0', 'job-5-node-1'].map((id) => drawnBox(id))
    expect(after.map(({ x, y, width, height }) => [x, y, width, height])).toEqual(
      before.map(({ x, y, width, height }) => [x, y, width, height]),
    )
  })

  it('says so when there is no machine yet', async () => {
    mockFetch({ 'GET /api/machines': () => json([]), 'GET /api/jobs': () => json([]) })
    renderWithProviders(<TopologyPage />)
    expect(await screen.findByText(/No machines yet/)).toBeInTheDocument()
  })
})

describe("a job's own topology", () => {
  it('draws its nodes on their machines only, not as links to itself', async () => {
    mockFetch({ 'GET /api/machines': () => json([alpha, beta, gamma]) })
    renderWithProviders(<JobTopology job={jobDetail()} />)

    const master = await screen.findByRole('group', { name: /^Job char-gpt \(#5\), node 0 of 2 on alpha, .*master$/ })
    expect(screen.getByRole('group', { name: /^Job char-gpt \(#5\), node 1 of 2 on beta/ })).toBeInTheDocument()
    expect(within(master).getByText('★ master')).toBeInTheDocument()
    expect(screen.queryByRole('link', { name: /^Job / })).not.toBeInTheDocument()
    expectInside('job-5-node-1', 'machine-2')
    // Machines the job does not use are left out.
    expect(screen.queryByRole('link', { name: /^Machine gamma/ })).not.toBeInTheDocument()
    expect(screen.getByText('attempt 0 · master 10.0.0.11:29500')).toBeInTheDocument()
  })
})
