import { act, screen, waitFor, within } from '@testing-library/react'
import userEvent from '@testing-library/user-event'
import { Route, Routes } from 'react-router-dom'
import { beforeEach, describe, expect, it, vi } from 'vitest'
import type { FunctionResult, FunctionResults, JobDetail } from '../../../lib/types'
import { FakeWebSocket } from '../../../test/fake-websocket'
import { jobDetail, jobGoodput, jobSpec } from '../../../test/fixtures'
import { json, mockFetch } from '../../../test/http'
import { withElementSize } from '../../../test/layout'
import { renderWithProviders } from '../../../test/render'
import { firstFailureRank } from '../function-results'
import { JobDetailPage } from './JobDetailPage'

function renderJobPage() {
  return renderWithProviders(
    <Routes>
      <Route path="/jobs/:id" element={<JobDetailPage />} />
    </Routes>,
    { path: '/jobs/5' },
  )
}

/** A job running `train` on four ranks, two nodes of two processes. */
function functionJob(overrides: Partial<JobDetail> = {}): JobDetail {
  const job = jobDetail({ name: 'fn-train', world_size: 4, ...overrides })
  const { entrypoint: _entrypoint, ...spec } = jobSpec({ name: 'fn-train' })
  return {
    ...job,
    spec: { ...spec, function: { payload: 'cd'.repeat(32), name: 'train', python: '3.11', size: 2048 } },
  }
}

function result(rank: number, overrides: Partial<FunctionResult> = {}): FunctionResult {
  return {
    rank,
    node_rank: rank < 2 ? 0 : 1,
    machine: rank < 2 ? 'alpha' : 'beta',
    attempt: 0,
    ok: true,
    size: 120,
    sha256: 'ef'.repeat(32),
    repr: `{'rank': ${rank}, 'loss': 0.25}`,
    error_type: '',
    error: '',
    traceback: '',
    raised_at: null,
    peer_failure: false,
    has_value: true,
    created_at: '2025-01-01T10:05:00Z',
    ...overrides,
  }
}

function results(status: string, list: FunctionResult[]): FunctionResults {
  return { function: 'train', status, attempt: 0, world_size: 4, results: list }
}

/** What the page fetches beside the job and its results. */
const pageRoutes = {
  'GET /api/machines': () => json([]),
  'GET /api/jobs/5/metrics': () => json({ job: 5, names: [], from_step: null, to_step: null, bucket_steps: null, series: [] }),
  'GET /api/jobs/5/checkpoints': () => json([]),
  'GET /api/jobs/5/goodput': () => json(jobGoodput()),
  'GET /api/jobs/5/artifacts': () => json([]),
}

const TRACEBACK = [
  'Traceback (most recent call last):',
  '  File "train.py", line 12, in train',
  '    loss = step(batch)',
  'RuntimeError: CUDA out of memory',
].join('\n')

withElementSize(900, 460)

describe('job page results of a function job', () => {
  beforeEach(() => {
    vi.stubGlobal('WebSocket', FakeWebSocket)
  })

  it("shows the function in the header and every rank's value with its pickle to download", async () => {
    const long = `[${Array.from({ length: 200 }, (_, i) => i).join(', ')}]`
    mockFetch({
      ...pageRoutes,
      'GET /api/jobs/5': () => json(functionJob({ status: 'completed' })),
      'GET /api/jobs/5/results': () =>
        json(results('completed', [result(0), result(1), result(2), result(3, { repr: long, has_value: true })])),
    })
    renderJobPage()

    expect(await screen.findByText('fn train · Python 3.11')).toBeInTheDocument()
    expect(screen.queryByText('Entrypoint')).not.toBeInTheDocument()

    const panel = await screen.findByRole('region', { name: 'Results' })
    expect(within(panel).getByRole('heading', { name: 'Results' })).toBeInTheDocument()
    expect(await within(panel).findByText('4 of 4 results')).toBeInTheDocument()
    for (const rank of [0, 1, 2]) {
      expect(within(panel).getByText(`{'rank': ${rank}, 'loss': 0.25}`)).toBeInTheDocument()
    }
    for (const rank of [0, 1, 2, 3]) {
      const link = within(panel).getByRole('link', { name: `rank-${rank}.pkl` })
      expect(link).toHaveAttribute('href', `/api/jobs/5/results/${rank}`)
      expect(link).toHaveAttribute('download', `rank-${rank}.pkl`)
    }

    // A long repr is cut, and the whole of it one click (or keypress) away.
    expect(within(panel).queryByText(long)).not.toBeInTheDocument()
    const toggle = within(panel).getByRole('button', { name: "Show all of rank 3's value" })
    expect(toggle).toHaveAttribute('aria-expanded', 'false')
    toggle.focus()
    await userEvent.keyboard('{Enter}')
    expect(within(panel).getByText(long)).toBeInTheDocument()
    expect(within(panel).getByRole('button', { name: "Show less of rank 3's value" })).toHaveAttribute('aria-expanded', 'true')
  })

  it('marks the rank that failed first, its traceback open, and the others as peers that went away', async () => {
    mockFetch({
      ...pageRoutes,
      'GET /api/jobs/5': () => json(functionJob({ status: 'failed', status_reason: 'rank 2 raised RuntimeError' })),
      'GET /api/jobs/5/results': () =>
        json(
          results('failed', [
            result(0, { ok: false, has_value: false, size: 0, repr: '', error_type: 'DistBackendError', error: 'rank 2 went away', traceback: 'Traceback: peer', raised_at: '2025-01-01T10:00:01Z', peer_failure: true }),
            result(1, { ok: false, has_value: false, size: 0, repr: '', error_type: 'ValueError', error: 'bad shard', traceback: 'Traceback: later', raised_at: '2025-01-01T10:00:03Z' }),
            result(2, { ok: false, has_value: true, repr: '', error_type: 'RuntimeError', error: 'CUDA out of memory', traceback: TRACEBACK, raised_at: '2025-01-01T10:00:02Z' }),
          ]),
        ),
    })
    renderJobPage()

    const panel = await screen.findByRole('region', { name: 'Results' })
    expect(await within(panel).findByText('3 of 4 results')).toBeInTheDocument()

    // Rank 2 raised before rank 1 did; rank 0's error, though earliest, only says a peer went away.
    const firstRow = within(panel).getByText('first failure').closest('tr')!
    expect(within(firstRow).getByRole('cell', { name: '2' })).toBeInTheDocument()
    expect(within(firstRow).getByText('RuntimeError: CUDA out of memory')).toHaveClass('text-bad')
    expect(within(firstRow).getByRole('link', { name: 'rank-2.pkl' })).toHaveAttribute('href', '/api/jobs/5/results/2')
    expect(within(panel).getAllByText('first failure')).toHaveLength(1)

    const traceback = within(panel).getByLabelText('Traceback of rank 2')
    expect(traceback).toBeVisible()
    expect(traceback.textContent).toBe(TRACEBACK)
    const hide = within(panel).getByRole('button', { name: 'Hide traceback of rank 2' })
    expect(hide).toHaveAttribute('aria-expanded', 'true')
    await userEvent.click(hide)
    expect(traceback).not.toBeVisible()
    expect(within(panel).getByRole('button', { name: 'Show traceback of rank 2' })).toHaveAttribute('aria-expanded', 'false')

    // The others stay closed until asked; the peer's is labelled as such.
    const peerRow = within(panel).getByText('peer went away').closest('tr')!
    expect(within(peerRow).getByText('DistBackendError: rank 2 went away')).toBeInTheDocument()
    expect(within(panel).getAllByText('peer went away')).toHaveLength(1)
    expect(within(panel).getByLabelText('Traceback of rank 0')).not.toBeVisible()
    expect(within(panel).getByLabelText('Traceback of rank 1')).not.toBeVisible()
    await userEvent.click(within(panel).getByRole('button', { name: 'Show traceback of rank 1' }))
    expect(within(panel).getByLabelText('Traceback of rank 1')).toBeVisible()
    expect(within(panel).getByLabelText('Traceback of rank 1')).toHaveTextContent('Traceback: later')
    expect(within(panel).queryByRole('link', { name: 'rank-1.pkl' })).not.toBeInTheDocument()
  })

  it('waits for results while the job runs and fetches them again as ranks return', async () => {
    let answer = results('running', [])
    const requests = mockFetch({
      ...pageRoutes,
      'GET /api/jobs/5': () => json(functionJob({ status: 'running' })),
      'GET /api/jobs/5/results': () => json(answer),
    })
    renderJobPage()

    const panel = await screen.findByRole('region', { name: 'Results' })
    expect(await within(panel).findByText('Results arrive as ranks return.')).toBeInTheDocument()
    expect(within(panel).getByText('0 of 4 results')).toBeInTheDocument()

    answer = results('running', [result(1)])
    const socket = await waitFor(() => FakeWebSocket.latest())
    act(() => {
      socket.open()
      socket.receive({
        type: 'events',
        events: [{ id: 3, job: 5, node: 51, node_rank: 0, rank: 1, attempt: 0, seq: null, type: 'result', ts: '2025-01-01T10:00:00Z', ok: true }],
      })
    })
    expect(await within(panel).findByText("{'rank': 1, 'loss': 0.25}")).toBeInTheDocument()
    expect(within(panel).getByText('1 of 4 results')).toBeInTheDocument()
    expect(requests.filter((r) => r.path === '/api/jobs/5/results')).toHaveLength(2)
  })

  it('finds the cause by raised_at among the failures that are not peer failures', () => {
    const failed = (rank: number, raised_at: string | null, peer_failure = false) =>
      result(rank, { ok: false, has_value: false, error_type: 'E', raised_at, peer_failure })
    expect(firstFailureRank([result(0), result(1)])).toBeNull()
    expect(firstFailureRank([failed(0, '2025-01-01T10:00:01Z', true), result(1)])).toBeNull()
    expect(firstFailureRank([failed(0, null), failed(1, '2025-01-01T10:00:05Z'), failed(2, '2025-01-01T10:00:02Z')])).toBe(2)
    expect(firstFailureRank([failed(3, '2025-01-01T10:00:02Z'), failed(1, '2025-01-01T10:00:02Z')])).toBe(1)
  })

  it('shows no results panel for a script job', async () => {
    mockFetch({ ...pageRoutes, 'GET /api/jobs/5': () => json(jobDetail({ status: 'completed' })) })
    renderJobPage()
    expect(await screen.findByRole('heading', { name: /char-gpt/ })).toBeInTheDocument()
    expect(await screen.findByRole('region', { name: 'Outputs' })).toBeInTheDocument()
    expect(screen.getByText('examples/char_gpt.py')).toBeInTheDocument()
    expect(screen.queryByRole('region', { name: 'Results' })).not.toBeInTheDocument()
    expect(screen.queryByText(/fn /)).not.toBeInTheDocument()
  })
})
