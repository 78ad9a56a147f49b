import { screen, within } from '@testing-library/react'
import { afterEach, describe, expect, it, vi } from 'vitest'
import type { JobGoodput } from '../../../lib/types'
import { json, mockFetch } from '../../../test/http'
import { goodputParts } from '../../../test/queue-fixtures'
import { renderWithProviders } from '../../../test/render'
import { GoodputPanel } from './GoodputPanel'

const goodput = (over: Partial<JobGoodput> = {}): JobGoodput => ({
  job: 5, status: 'completed', live: false, started_at: '2026-01-01T00:00:00Z', ended_at: '2026-01-01T00:09:16Z',
  wall_seconds: 556, goodput: 150 / 556,
  parts: goodputParts({ queued: 101, preempted: 114, code_fetch: 11, environment_build: 30, launch: 14, training: 150,
    checkpoint: 4, recovery: 31, lost_work: 50, hang: 18, idle: 33 }),
  attempts: [
    { attempt: 0, started_at: '2026-01-01T00:00:00Z', ended_at: '2026-01-01T00:05:31Z', wall_seconds: 331,
      goodput: 50 / 331, parts: goodputParts({ queued: 101, code_fetch: 10, environment_build: 30, launch: 9, training: 50,
        checkpoint: 2, recovery: 31, lost_work: 50, hang: 18, idle: 30 }) },
    { attempt: 1, started_at: '2026-01-01T00:05:31Z', ended_at: '2026-01-01T00:09:16Z', wall_seconds: 225,
      goodput: 100 / 225, parts: goodputParts({ preempted: 114, code_fetch: 1, launch: 5, training: 100, checkpoint: 2,
        idle: 3 }) },
  ],
  ...over,
})

afterEach(() => vi.unstubAllGlobals())

describe('GoodputPanel', () => {
  it('splits the wall time into a stacked bar with its key, then each attempt the same way', async () => {
    const requests = mockFetch({ 'GET /api/jobs/5/goodput': () => json(goodput()) })
    renderWithProviders(<GoodputPanel jobId={5} seen={9} />)

    expect(await screen.findByTestId('goodput-summary')).toHaveTextContent('27.0% of 9m 16s training')
    expect(requests.map((r) => r.path)).toEqual(['/api/jobs/5/goodput'])
    const panel = screen.getByRole('region', { name: 'Goodput' })
    const [whole, first, second] = within(panel).getAllByRole('img')
    expect(whole.getAttribute('aria-label')).toMatch(/^The whole job: Queued 18\.2%, Preempted 20\.5%, Code fetch 2\.0%/)
    expect(whole.querySelectorAll('.goodput-segment')).toHaveLength(11)
    const legend = within(panel).getByRole('list', { name: 'Where the time went' })
    expect(within(legend).getAllByRole('listitem').map((i) => i.dataset.category)).toEqual([
      'queued', 'preempted', 'code_fetch', 'environment_build', 'launch', 'training', 'checkpoint', 'recovery',
      'lost_work', 'hang', 'idle',
    ])
    const attempts = within(panel).getByRole('list', { name: 'Attempts' })
    expect(within(attempts).getAllByRole('listitem').map((i) => i.querySelector('.goodput-attempt-label')?.textContent)).toEqual([
      'Attempt 0 5m 31s, 15.1% training',
      'Attempt 1 3m 45s, 44.4% training',
    ])
    expect(first.getAttribute('aria-label')).toContain('Lost work 15.1%')
    expect(second.getAttribute('aria-label')).toMatch(/^Attempt 1: Preempted 50\.7%/)
  })

  it('shows a single attempt without a list, and says so while the job runs', async () => {
    const one = goodput({ live: true, status: 'running', wall_seconds: 60, goodput: 0.5,
      parts: goodputParts({ queued: 10, launch: 20, training: 30 }) })
    mockFetch({ 'GET /api/jobs/5/goodput': () => json({ ...one, attempts: one.attempts.slice(0, 1) }) })
    renderWithProviders(<GoodputPanel jobId={5} seen={3} />)
    expect(await screen.findByTestId('goodput-summary')).toHaveTextContent('50.0% of 1m 0s training so far')
    expect(screen.queryByRole('list', { name: 'Attempts' })).not.toBeInTheDocument()
  })

  it('says so when the split cannot be read', async () => {
    mockFetch({ 'GET /api/jobs/5/goodput': () => json({ detail: 'boom' }, 500) })
    renderWithProviders(<GoodputPanel jobId={5} seen={0} />)
    expect(await screen.findByText('Goodput is unavailable.')).toBeInTheDocument()
  })
})
