import { act, screen, waitFor, within } from '@testing-library/react'
import userEvent from '@testing-library/user-event'
import { describe, expect, it, vi } from 'vitest'
import { ClusterStreamProvider } from '../../../app/ClusterStreamProvider'
import { FakeWebSocket } from '../../../test/fake-websocket'
import { jobDetail, jobSummary } from '../../../test/fixtures'
import { csrfRoute, json, mockFetch } from '../../../test/http'
import { project, queueEntry } from '../../../test/queue-fixtures'
import { renderWithProviders } from '../../../test/render'
import { asksText, expectedStartText } from '../queue-wording'
import { QueuePage } from './QueuePage'

const me = (username = 'ada', isStaff = false) => () => json({ username, is_staff: isStaff, projects: ['vision', 'nlp'] })

const head = queueEntry({
  id: 7,
  name: 'resnet-big',
  priority: 10,
  position: 1,
  head: true,
  gpus: 8,
  processes: 8,
  reason: 'needs 2 machines with 4 free GPUs; 1 has them',
  expected_start: new Date(Date.now() + 12 * 60_000).toISOString(),
})
const backfill = queueEntry({
  id: 8,
  name: 'tiny-probe',
  owner: 'bob',
  project: 'nlp',
  position: 3,
  backfill: true,
  blocked_by: null,
  reason: 'starting',
  gpus: 0,
  processes: 1,
})
const borrowing = queueEntry({ id: 9, name: 'sweep-3', owner: 'bob', priority: -10, position: 4, borrowing: true, blocked_by: 'quota', reason: 'project vision is at its quota of 8 GPUs' })

function rowOf(name: string) {
  return screen.getByRole('link', { name }).closest('tr')!
}

describe('queue page', () => {
  it('lists the queued jobs in order with place, priority, who, what they ask, and why they wait', async () => {
    mockFetch({
      'GET /api/queue': () => json({ jobs: [head, backfill, borrowing], total: 5 }),
      'GET /api/auth/me': me('carol'),
      'GET /api/projects': () => json([project({ role: 'viewer' }), project({ id: 2, name: 'nlp', role: 'viewer' })]),
    })
    renderWithProviders(<QueuePage />)

    const table = await screen.findByRole('table', { name: 'Queued jobs' })
    const rows = within(table).getAllByRole('row').slice(1)
    expect(rows.map((r) => within(r).getAllByRole('cell')[0].textContent)).toEqual(['1', '3', '4'])
    expect(screen.getByTestId('queue-count')).toHaveTextContent('3 of 5 in the whole queue')

    const first = within(rowOf('resnet-big'))
    expect(first.getByRole('link', { name: 'resnet-big' })).toHaveAttribute('href', '/jobs/7')
    // carol may only look: the priority is a badge, not a select.
    expect(first.getByText('high')).toHaveClass('prio', 'prio-high')
    expect(first.queryByRole('combobox')).not.toBeInTheDocument()
    expect(first.getByText('8 GPUs, 8 processes')).toBeInTheDocument()
    expect(first.getByText('head')).toHaveClass('tag-head')
    expect(first.getByText('needs 2 machines with 4 free GPUs; 1 has them')).toBeInTheDocument()
    expect(first.getByText(/^expected to start in 1[12]m/)).toBeInTheDocument()

    const second = within(rowOf('tiny-probe'))
    expect(second.getByText('backfill')).toHaveClass('tag-backfill')
    expect(second.getByText('starting', { selector: '.tag' })).toBeInTheDocument()
    expect(second.getByText('1 process')).toBeInTheDocument()
    expect(second.getByText('nlp')).toBeInTheDocument()
    expect(second.getByText('bob')).toBeInTheDocument()
    expect(second.queryByText(/expected to start/)).not.toBeInTheDocument()

    const third = within(rowOf('sweep-3'))
    expect(third.getByText('borrowing')).toHaveClass('tag-borrowing')
    expect(third.queryByText('preempted')).not.toBeInTheDocument()
    expect(third.getByText('low')).toHaveClass('prio-low')
  })

  it('marks a job that yielded to a higher-priority one as preempted', async () => {
    const yielded = queueEntry({ id: 11, name: 'yielded-run', status: 'preempted', blocked_by: 'resources' })
    mockFetch({
      'GET /api/queue': () => json({ jobs: [yielded], total: 1 }),
      'GET /api/auth/me': me('carol'),
      'GET /api/projects': () => json([project({ role: 'viewer' })]),
    })
    renderWithProviders(<QueuePage />)
    await screen.findByRole('table', { name: 'Queued jobs' })
    expect(within(rowOf('yielded-run')).getByText('preempted')).toHaveClass('tag', 'tag-preempted')
  })

  it("lets the job's owner change its priority, and shows the server's refusal", async () => {
    let answer = () => json(jobDetail({ id: 7, name: 'resnet-big', project: 'vision', status: 'queued', priority: 0 }))
    let priority = 0
    const requests = mockFetch({
      ...csrfRoute(),
      'GET /api/queue': () => json({ jobs: [queueEntry({ id: 7, name: 'resnet-big', priority }), borrowing], total: 2 }),
      'GET /api/auth/me': me('ada'),
      'GET /api/projects': () => json([project({ role: 'member', priority_ceiling: 0 })]),
      'PATCH /api/jobs/7': () => answer(),
    })
    renderWithProviders(<QueuePage />)

    // ada owns resnet-big; bob's sweep-3 is not hers to change.
    const select = await within(await waitFor(() => rowOf('resnet-big'))).findByRole('combobox', { name: 'Priority of resnet-big (#7)' })
    expect(within(rowOf('sweep-3')).queryByRole('combobox')).not.toBeInTheDocument()
    expect(select).toHaveValue('normal')
    expect(within(select).getAllByRole('option').map((o) => o.textContent)).toEqual(['high', 'normal', 'low'])

    answer = () => json({ priority: ["priority 10 (high) is above project vision's ceiling of 0 (normal); ask one of its admins to raise it"] }, 400)
    await userEvent.selectOptions(select, 'high')
    expect(await within(rowOf('resnet-big')).findByRole('alert')).toHaveTextContent("above project vision's ceiling of 0 (normal)")
    expect(select).toHaveValue('normal')

    answer = () => {
      priority = -10
      return json(jobDetail({ id: 7, name: 'resnet-big', project: 'vision', status: 'queued', priority }))
    }
    await userEvent.selectOptions(select, 'low')
    await waitFor(() => expect(select).toHaveValue('low'))
    expect(within(rowOf('resnet-big')).queryByRole('alert')).not.toBeInTheDocument()
    const patches = requests.filter((r) => r.method === 'PATCH')
    expect(patches.map((r) => r.body)).toEqual([{ priority: 'high' }, { priority: 'low' }])
    // The queue is asked again for the job's new place.
    await waitFor(() => expect(requests.filter((r) => r.path === '/api/queue')).toHaveLength(2))
  })

  it('follows the cluster stream: queue messages replace it, a job leaving it asks again', async () => {
    vi.stubGlobal('WebSocket', FakeWebSocket)
    let queue = { jobs: [head, borrowing], total: 2 }
    const requests = mockFetch({
      'GET /api/queue': () => json(queue),
      'GET /api/auth/me': me('carol'),
      'GET /api/projects': () => json([]),
    })
    renderWithProviders(
      <ClusterStreamProvider>
        <QueuePage />
      </ClusterStreamProvider>,
    )
    await screen.findByRole('link', { name: 'resnet-big' })
    const socket = await waitFor(() => FakeWebSocket.latest())
    act(() => socket.open())
    const fetches = () => requests.filter((r) => r.path === '/api/queue').length

    // A pass moved sweep-3 ahead and a new job came in: the message is the queue, no request made.
    const before = fetches()
    act(() => {
      socket.receive({ type: 'queue', jobs: [{ ...borrowing, position: 1 }, { ...head, position: 2 }, backfill], total: 3 })
    })
    await waitFor(() => expect(screen.getAllByRole('row').slice(1).map((r) => within(r).getAllByRole('link')[0].textContent)).toEqual(['sweep-3', 'resnet-big', 'tiny-probe']))
    expect(fetches()).toBe(before)

    // A running job's progress is not the queue's business...
    act(() => socket.receive({ type: 'jobs_changed', jobs: [jobSummary({ id: 3, status: 'running' })] }))
    // ...but one of its jobs starting is: the queue is asked again.
    queue = { jobs: [head], total: 1 }
    act(() => socket.receive({ type: 'jobs_changed', jobs: [jobSummary({ id: 9, name: 'sweep-3', status: 'planning' })] }))
    await waitFor(() => expect(screen.queryByRole('link', { name: 'sweep-3' })).not.toBeInTheDocument())
    expect(fetches()).toBe(before + 1)

    // The last one leaves: the empty state.
    act(() => socket.receive({ type: 'queue', jobs: [], total: 0 }))
    expect(await screen.findByText('Nothing is waiting: every job submitted is running or done.')).toBeInTheDocument()
  })

  it("says when only other projects' jobs wait", async () => {
    mockFetch({ 'GET /api/queue': () => json({ jobs: [], total: 2 }) })
    renderWithProviders(<QueuePage />)
    expect(await screen.findByText("None of your projects' jobs wait; 2 jobs of other projects do.")).toBeInTheDocument()
  })
})

describe('queue wording', () => {
  it('says what a job asks and when the head is expected to start', () => {
    expect(asksText({ gpus: 2, processes: 4 })).toBe('2 GPUs, 4 processes')
    expect(asksText({ gpus: 1, processes: 1 })).toBe('1 GPU, 1 process')
    expect(asksText({ gpus: 0, processes: 3 })).toBe('3 processes')
    const now = Date.parse('2025-01-01T10:00:00Z')
    expect(expectedStartText('2025-01-01T11:30:00Z', now)).toMatch(/^expected to start in 1h 30m \(/)
    expect(expectedStartText('2025-01-01T10:00:10Z', now)).toBe('expected to start any moment now')
    expect(expectedStartText(null, now)).toMatch(/^start unknown/)
  })
})
