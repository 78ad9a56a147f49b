import { act, screen, waitFor, within } from '@testing-library/react'
import { describe, expect, it, vi } from 'vitest'
import { ClusterStreamProvider } from '../../../app/ClusterStreamProvider'
import { FakeWebSocket } from '../../../test/fake-websocket'
import type { JobStatus } from '../../../lib/types'
import { jobSummary, progress } from '../../../test/fixtures'
import { json, mockFetch } from '../../../test/http'
import { renderWithProviders } from '../../../test/render'
import { JobsPanel } from './JobsPanel'

const jobs = [
  jobSummary({ id: 3, name: 'gpt-small', status: 'running', progress: progress({ step: 120, total_steps: 500, throughput: 812.5, loss: 1.2, eta_seconds: 40 }) }),
  jobSummary({ id: 2, name: 'mlp-a', status: 'failed', status_reason: 'node 1 lost', attempt: 3 }),
  jobSummary({ id: 1, name: 'mlp-b', status: 'queued', world_size: null, progress: progress() }),
]

function row(name: string) {
  return screen.getByRole('link', { name }).closest('tr')!
}

describe('jobs list', () => {
  it('renders each job with its status badge, progress and a link to its page', async () => {
    mockFetch({ 'GET /api/jobs': () => json(jobs) })
    renderWithProviders(<JobsPanel />)

    expect(await screen.findByRole('link', { name: 'gpt-small' })).toHaveAttribute('href', '/jobs/3')
    const running = within(row('gpt-small'))
    expect(running.getByText('running')).toHaveClass('badge', 'badge-running')
    expect(running.getByText('120 / 500')).toBeInTheDocument()
    expect(running.getByRole('progressbar')).toHaveAttribute('aria-valuenow', '120')
    expect(running.getByText('812.5/s')).toBeInTheDocument()

    const failed = within(row('mlp-a')).getByText('failed')
    expect(failed).toHaveClass('badge-failed')
    expect(failed).toHaveAttribute('title', 'node 1 lost')
    expect(within(row('mlp-b')).getByText('queued')).toHaveClass('badge-queued')
  })

  it("badges a priority other than normal, a borrowing job, and a preempted one's status", async () => {
    mockFetch({
      'GET /api/jobs': () =>
        json([
          jobSummary({ id: 6, name: 'urgent', priority: 10, borrowing: true }),
          jobSummary({ id: 5, name: 'custom', status: 'queued', priority: 25 }),
          jobSummary({ id: 4, name: 'yielded', status: 'preempted' as JobStatus, priority: -10, status_reason: 'preempted by #6' }),
          jobSummary({ id: 3, name: 'plain' }),
        ]),
    })
    renderWithProviders(<JobsPanel />)
    await screen.findByRole('link', { name: 'urgent' })
    expect(within(row('urgent')).getByText('high')).toHaveClass('prio-high')
    expect(within(row('urgent')).getByText('borrowing')).toHaveClass('tag-borrowing')
    expect(within(row('custom')).getByText('25')).toHaveClass('prio')
    expect(within(row('yielded')).getByText('low')).toHaveClass('prio-low')
    expect(within(row('yielded')).getByText('preempted')).toHaveClass('badge-preempted')
    expect(within(row('yielded')).getByText('preempted')).toHaveAttribute('title', 'preempted by #6')
    // Normal is the default: no badge, no clutter.
    expect(row('plain').querySelector('.prio, .tag')).toBeNull()
  })

  it('applies job messages from the cluster stream to the list', async () => {
    const requests = mockFetch({ 'GET /api/jobs': () => json(jobs) })
    vi.stubGlobal('WebSocket', FakeWebSocket)
    const { client } = renderWithProviders(
      <ClusterStreamProvider>
        <JobsPanel />
      </ClusterStreamProvider>,
    )
    await screen.findByRole('link', { name: 'gpt-small' })
    const socket = await waitFor(() => FakeWebSocket.latest())
    expect(socket.target).toBe('/api/cluster/stream')

    // On connect the server sends the current list: it replaces the cache without a refetch.
    act(() => {
      socket.open()
      socket.receive({ type: 'jobs', jobs })
    })
    await waitFor(() => expect(client.isFetching()).toBe(0))
    expect(requests.filter((r) => r.path === '/api/jobs')).toHaveLength(1)

    act(() => {
      socket.receive({
        type: 'jobs_changed',
        jobs: [
          { ...jobs[0], status: 'completed', progress: { ...jobs[0].progress, step: 500 } },
          jobSummary({ id: 4, name: 'fresh', status: 'planning' }),
        ],
      })
    })

    await waitFor(() => expect(within(row('gpt-small')).getByText('completed')).toHaveClass('badge-completed'))
    expect(within(row('gpt-small')).getByText('500 / 500')).toBeInTheDocument()
    // A job we had not seen goes to the top (newest first).
    const names = screen.getAllByRole('row').slice(1).map((r) => within(r).getAllByRole('link')[1].textContent)
    expect(names).toEqual(['fresh', 'gpt-small', 'mlp-a', 'mlp-b'])
  })
})
