import { act, screen, waitFor, within } from '@testing-library/react'
import userEvent from '@testing-library/user-event'
import { Route, Routes } from 'react-router-dom'
import { beforeEach, describe, expect, it, vi } from 'vitest'
import type { JobDetail, JobEvent, LogEvent } from '../../../lib/types'
import { FakeWebSocket } from '../../../test/fake-websocket'
import { jobDetail, jobGoodput, jobNode } from '../../../test/fixtures'
import { withElementSize } from '../../../test/layout'
import { csrfRoute, json, mockFetch } from '../../../test/http'
import { project } from '../../../test/queue-fixtures'
import { renderWithProviders } from '../../../test/render'
import { JobDetailPage } from './JobDetailPage'

function log(id: number, rank: number, line: string): LogEvent {
  return {
    id,
    job: 5,
    node: 51 + rank,
    node_rank: rank,
    rank,
    attempt: 0,
    seq: null,
    type: 'log',
    ts: '2025-01-01T10:00:00Z',
    stream: 'stdout',
    line,
  }
}

function renderJobPage() {
  return renderWithProviders(
    <Routes>
      <Route path="/jobs/:id" element={<JobDetailPage />} />
    </Routes>,
    { path: '/jobs/5' },
  )
}

function logLines(): string[] {
  return Array.from(screen.getByTestId('log-box').querySelectorAll('.log-line')).map((el) => {
    // Keep "[rank N] line", without the clock.
    const copy = el.cloneNode(true) as HTMLElement
    copy.querySelector('.log-ts')?.remove()
    return copy.textContent!.trim()
  })
}

/**
 * What the page fetches beside the job: machines (topology, node use), metric history, checkpoints;
 * who you are and your projects' roles (whether you may change a live job's priority).
 */
const pageRoutes = {
  'GET /api/auth/me': () => json({ username: 'ada', is_staff: false, projects: ['default'] }),
  'GET /api/projects': () => json([project({ name: 'default', role: 'member' })]),
  'GET /api/machines': () => json([]),
  'GET /api/jobs/5/metrics': () => json({ job: 5, names: [], from_step: null, to_step: null, bucket_steps: null, series: [] }),
  'GET /api/jobs/5/checkpoints': () => json([]),
  'GET /api/jobs/5/goodput': () => json(jobGoodput()),
  'GET /api/jobs/5/artifacts': () => json([]),
}

withElementSize(900, 460)

describe('job page live stream', () => {
  beforeEach(() => {
    vi.stubGlobal('WebSocket', FakeWebSocket)
    mockFetch({ ...pageRoutes, 'GET /api/jobs/5': () => json(jobDetail()) })
  })

  it('appends streamed log lines prefixed by rank and drops events it already has', async () => {
    renderJobPage()
    expect(await screen.findByRole('heading', { name: /char-gpt/ })).toBeInTheDocument()
    const socket = await waitFor(() => FakeWebSocket.latest())
    expect(socket.target).toBe('/api/jobs/5/stream?after=0&history=tail')

    act(() => {
      socket.open()
      socket.receive({ type: 'events', events: [log(1, 0, 'step 1 loss 2.1'), log(2, 1, 'step 1 loss 2.2')] })
    })
    await waitFor(() => expect(logLines()).toEqual(['[rank 0] step 1 loss 2.1', '[rank 1] step 1 loss 2.2']))

    // An overlapping batch (2 was already delivered) and a repeat of a whole batch.
    act(() => {
      socket.receive({ type: 'events', events: [log(2, 1, 'step 1 loss 2.2'), log(3, 0, 'step 2 loss 1.9')] })
      socket.receive({ type: 'events', events: [log(3, 0, 'step 2 loss 1.9')] })
    })
    await waitFor(() =>
      expect(logLines()).toEqual([
        '[rank 0] step 1 loss 2.1',
        '[rank 1] step 1 loss 2.2',
        '[rank 0] step 2 loss 1.9',
      ]),
    )

    // Filter by rank.
    await userEvent.selectOptions(screen.getByLabelText('Filter by rank'), '1')
    expect(logLines()).toEqual(['[rank 1] step 1 loss 2.2'])
  })

  it('updates nodes and the job from state events and job messages', async () => {
    renderJobPage()
    await screen.findByRole('heading', { name: /char-gpt/ })
    const socket = await waitFor(() => FakeWebSocket.latest())
    const nodeOne = () => within(screen.getByRole('article', { name: 'Node 1' }))
    expect(nodeOne().getByText('running')).toBeInTheDocument()

    const failed: JobEvent = {
      id: 7,
      job: 5,
      node: 52,
      node_rank: 1,
      rank: null,
      attempt: 0,
      seq: null,
      type: 'state',
      ts: '2025-01-01T10:00:09Z',
      scope: 'node',
      status: 'failed',
      previous: 'running',
      reason: 'exit code 1',
    }
    act(() => {
      socket.open()
      socket.receive({ type: 'events', events: [failed] })
    })
    await waitFor(() => expect(nodeOne().getByText('failed')).toHaveClass('badge-failed'))

    act(() => {
      socket.receive({ type: 'job', job: jobDetail({ status: 'failed', status_reason: 'node 1 exited with code 1' }) })
    })
    expect(await screen.findByRole('alert')).toHaveTextContent('node 1 exited with code 1')
    expect(screen.queryByRole('button', { name: /Stop all nodes/ })).not.toBeInTheDocument()
  })

  it('reconnects after a drop and resumes after the last event id it saw', async () => {
    renderJobPage()
    await screen.findByRole('heading', { name: /char-gpt/ })
    const first = await waitFor(() => FakeWebSocket.latest())
    act(() => {
      first.open()
      first.receive({ type: 'events', events: [log(1, 0, 'a'), log(2, 1, 'b'), log(41, 0, 'c')] })
      first.drop()
    })
    expect(screen.getByRole('status')).toHaveTextContent('Reconnecting to the live stream… it resumes after event #41')

    // First retry after the 0.5 s minimum backoff.
    await waitFor(() => expect(FakeWebSocket.instances).toHaveLength(2), { timeout: 2_000 })
    const second = FakeWebSocket.latest()
    expect(second.target).toBe('/api/jobs/5/stream?after=41&history=tail')

    // The server replays strictly after 41; lines already shown stay once.
    act(() => {
      second.open()
      second.receive({ type: 'events', events: [log(42, 1, 'd')] })
    })
    await waitFor(() => expect(logLines()).toEqual(['[rank 0] a', '[rank 1] b', '[rank 0] c', '[rank 1] d']))
    expect(screen.queryByRole('status')).not.toBeInTheDocument()
  })

  it('stops all nodes only once the user confirms', async () => {
    const requests = mockFetch({
      ...pageRoutes,
      ...csrfRoute(),
      'GET /api/jobs/5': () => json(jobDetail()),
      'POST /api/jobs/5/stop': () => json(jobDetail({ status: 'stopping' })),
    })
    renderJobPage()
    await userEvent.click(await screen.findByRole('button', { name: 'Stop all nodes…' }))
    const dialog = screen.getByRole('alertdialog', { name: 'Confirm stop' })
    expect(dialog).toHaveTextContent('Stop job #5 "char-gpt"? Every one of its 2 nodes is stopped')
    await userEvent.click(within(dialog).getByRole('button', { name: 'Cancel' }))
    expect(requests.filter((r) => r.method === 'POST')).toEqual([])

    await userEvent.click(screen.getByRole('button', { name: 'Stop all nodes…' }))
    // Focus is on the confirming button: Enter confirms from the keyboard.
    expect(screen.getByRole('button', { name: 'Stop all nodes' })).toHaveFocus()
    await userEvent.keyboard('{Enter}')
    await waitFor(() => expect(requests.filter((r) => r.method === 'POST').map((r) => r.path)).toEqual(['/api/jobs/5/stop']))
    expect(await screen.findByText('stopping')).toHaveClass('badge-stopping')
  })
})

describe('job page priority and queue', () => {
  beforeEach(() => {
    vi.stubGlobal('WebSocket', FakeWebSocket)
  })

  it("shows a live job's priority, lets its owner change it, and badges borrowing", async () => {
    const requests = mockFetch({
      ...pageRoutes,
      ...csrfRoute(),
      'GET /api/jobs/5': () => json(jobDetail({ priority: 10, borrowing: true })),
      'PATCH /api/jobs/5': () => json(jobDetail({ priority: 0, borrowing: true })),
    })
    renderJobPage()
    const header = within((await screen.findByRole('heading', { name: /char-gpt/ })).closest('header')!)
    expect(header.getByText('high', { selector: '.job-title-row .prio' })).toHaveClass('prio-high')
    expect(header.getByText('borrowing')).toHaveClass('tag-borrowing')
    const select = await header.findByRole('combobox', { name: 'Priority of char-gpt (#5)' })
    expect(select).toHaveValue('high')

    await userEvent.selectOptions(select, 'normal')
    await waitFor(() => expect(select).toHaveValue('normal'))
    expect(requests.find((r) => r.method === 'PATCH')!.body).toEqual({ priority: 'normal' })
    // Normal again: the badge beside the status goes.
    expect(header.queryByText('high', { selector: '.job-title-row .prio' })).not.toBeInTheDocument()
  })

  it("says why a queued or preempted job waits; a finished job's priority is only shown", async () => {
    let job = jobDetail({ status: 'queued', status_reason: 'waiting for 2 machines with room for 2 more processes each', nodes: [] })
    mockFetch({ ...pageRoutes, 'GET /api/jobs/5': () => json(job) })
    const { unmount } = renderJobPage()
    expect(await screen.findByText(/^Waiting in the queue: waiting for 2 machines/)).toBeInTheDocument()
    expect(screen.getByRole('link', { name: 'See the queue' })).toHaveAttribute('href', '/queue')
    unmount()

    job = jobDetail({ status: 'preempted' as JobDetail['status'], status_reason: 'preempted by #9 (high)', nodes: [] })
    const second = renderJobPage()
    expect(await screen.findByText(/^Preempted, back in the queue: preempted by #9 \(high\)/)).toHaveClass('status-note-preempted')
    expect(screen.getByText('preempted', { selector: '.badge' })).toHaveClass('badge-preempted')
    // Still live: it can be stopped.
    expect(screen.getByRole('button', { name: 'Stop all nodes…' })).toBeInTheDocument()
    second.unmount()

    job = jobDetail({ status: 'completed', priority: -10 })
    renderJobPage()
    await screen.findByRole('heading', { name: /char-gpt/ })
    expect(screen.queryByRole('combobox', { name: /^Priority of/ })).not.toBeInTheDocument()
    expect(screen.getAllByText('low', { selector: '.prio' }).length).toBeGreaterThan(0)
  })
})

describe('job page outputs', () => {
  beforeEach(() => {
    vi.stubGlobal('WebSocket', FakeWebSocket)
    mockFetch({
      ...pageRoutes,
      'GET /api/jobs/5': () => json(jobDetail()),
      'GET /api/jobs/5/artifacts': () =>
        json([
          { id: 9, attempt: 0, node_rank: 1, path: 'model.pt', size: 2_500_000, sha256: 'ab'.repeat(32), created_at: '2025-01-01T10:00:00Z' },
        ]),
    })
  })

  it('lists collected outputs with a download link each and one for all', async () => {
    renderJobPage()
    const outputs = await screen.findByRole('region', { name: 'Outputs' })
    const link = await within(outputs).findByRole('link', { name: 'model.pt' })
    expect(link).toHaveAttribute('href', '/api/jobs/5/artifacts/9')
    expect(within(outputs).getByText('2.5 MB')).toBeInTheDocument()
    expect(within(outputs).getByRole('link', { name: 'Download all (zip)' })).toHaveAttribute('href', '/api/jobs/5/artifacts/archive')
  })
})

describe('job page Ray nodes', () => {
  const ports = { node_manager: 20001, object_manager: 20002, dashboard_agent_listen: 20003, dashboard_agent_grpc: 20004, metrics_export: 20005, runtime_env_agent: 20006 }
  const ray = {
    head: true,
    address: '10.0.0.1',
    gcs: '10.0.0.1:6379',
    ports: { ...ports, dashboard: 8265, min_worker: 21000, max_worker: 21063 },
    temp_dir: '/tmp/ty-ray-5',
    object_store_bytes: 1_200_000_000,
    num_cpus: 4,
    num_gpus: 0,
    dashboard_port: 8265,
  }
  const rayJob = () =>
    jobDetail({
      nodes: [
        jobNode({ progress: { step: 3, loss: null, throughput: null, ray } }),
        jobNode({
          id: 52,
          node_rank: 1,
          machine: { id: 2, name: 'beta', host: '10.0.0.2' },
          rank_start: 1,
          rank_end: 1,
          progress: {
            step: null,
            loss: null,
            throughput: null,
            ray: { ...ray, head: false, address: '10.0.0.2', ports: { ...ports, min_worker: 22000, max_worker: 22063 }, num_cpus: 1, num_gpus: 1, dashboard_port: null },
          },
        }),
      ],
    })

  beforeEach(() => {
    vi.stubGlobal('WebSocket', FakeWebSocket)
  })

  it("shows each Ray node's role, GCS, dashboard, resources and every port it took", async () => {
    mockFetch({ ...pageRoutes, 'GET /api/jobs/5': () => json(rayJob()) })
    renderJobPage()
    const head = within(await screen.findByRole('article', { name: 'Node 0' }))
    const line = head.getByText('Ray head · GCS 10.0.0.1:6379 · dashboard :8265 · 4 CPUs, 0 GPUs, object store 1.2 GB')
    expect(line).toHaveAttribute('title', expect.stringContaining('node_manager 20001'))
    expect(line).toHaveAttribute('title', expect.stringContaining('workers 21000–21063'))
    const headPorts = head.getByRole('list', { name: 'Ray ports of node 0', hidden: true })
    expect(Array.from(headPorts.querySelectorAll('li')).map((li) => li.textContent)).toEqual([
      'dashboard 8265',
      'node_manager 20001',
      'object_manager 20002',
      'dashboard_agent_listen 20003',
      'dashboard_agent_grpc 20004',
      'metrics_export 20005',
      'runtime_env_agent 20006',
      'workers 21000–21063',
    ])

    const worker = within(screen.getByRole('article', { name: 'Node 1' }))
    expect(worker.getByText('Ray worker · GCS 10.0.0.1:6379 · 1 CPU, 1 GPU, object store 1.2 GB')).toBeInTheDocument()
    expect(worker.getByRole('list', { name: 'Ray ports of node 1', hidden: true })).toHaveTextContent('workers 22000–22063')
  })

  it('shows no Ray line for the nodes of another job', async () => {
    mockFetch({ ...pageRoutes, 'GET /api/jobs/5': () => json(jobDetail()) })
    renderJobPage()
    await screen.findByRole('article', { name: 'Node 0' })
    expect(screen.queryByText(/^Ray /)).not.toBeInTheDocument()
    expect(screen.queryByRole('list', { name: /Ray ports/, hidden: true })).not.toBeInTheDocument()
  })
})
