import { fireEvent, screen, waitFor, within } from '@testing-library/react'
import { Route, Routes } from 'react-router-dom'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { csrfRoute, json, mockFetch } from '../../../test/http'
import { renderWithProviders } from '../../../test/render'
import type { Sweep, Trial } from '../api/sweeps'
import { SweepDetailPage } from './SweepDetailPage'

afterEach(() => vi.unstubAllGlobals())

const trial = (over: Partial<Trial>): Trial => ({
  number: 0, job: 10, job_status: 'completed', status: 'completed', params: { lr: 0.01, hidden: 16 }, value: 0.5,
  step: 60, reason: '', created_at: '2026-12-03T18:00:00Z', finished_at: '2026-12-03T18:01:00Z', ...over,
})

const sweep = (over: Partial<Sweep> = {}): Sweep => ({
  id: 5, name: 'lr-search', project: 'default', owner: 'admin', status: 'running', reason: '',
  spec: {
    space: { lr: { loguniform: [0.0001, 0.3] }, hidden: { choice: [16, 64] } },
    searcher: { name: 'asha', metric: 'loss', mode: 'min', max_concurrent: 2 },
  },
  counts: { running: 1, completed: 2, pruned: 1, failed: 0, stopped: 0, max_trials: 6 },
  best_trial: { number: 1, job: 11, hyperparameters: { lr: 0.003, hidden: 64 }, metric: 0.2 },
  trials: [
    trial({ number: 0, job: 10, value: 0.5 }),
    trial({ number: 1, job: 11, value: 0.2, params: { lr: 0.003, hidden: 64 } }),
    trial({ number: 2, job: 12, status: 'pruned', value: 0.9, step: 5,
            reason: 'pruned at step 5 (loss 0.9): lowest 1 of the 3 trials that reached step 5 go on' }),
    trial({ number: 3, job: 13, status: 'running', job_status: 'running', value: null, step: null, finished_at: null }),
  ],
  created_at: '2026-12-03T18:00:00Z', finished_at: null, ...over,
})

const metrics = { job: 10, names: ['loss'], from_step: 1, to_step: 2, bucket_steps: 1, series: [] }

describe('SweepDetailPage', () => {
  it('shows how far the sweep got, its best trial, why a trial was pruned, and sorts the trials by the metric', async () => {
    mockFetch({
      'GET /api/sweeps/5': () => json(sweep()),
      ...Object.fromEntries([10, 11, 12, 13].map((id) => [`GET /api/jobs/${id}/metrics`, () => json({ ...metrics, job: id })])),
    })
    renderWithProviders(<Routes><Route path="/sweeps/:id" element={<SweepDetailPage />} /></Routes>, { path: '/sweeps/5' })

    expect(await screen.findByText('3 / 6 trials done')).toBeInTheDocument()
    const best = screen.getByLabelText('best trial')
    expect(within(best).getByText('loss 0.2000')).toBeInTheDocument()
    expect(within(best).getByRole('link', { name: 'job #11' })).toHaveAttribute('href', '/jobs/11')
    expect(within(best).getByText('lr=0.00300, hidden=64')).toBeInTheDocument()
    expect(screen.getByText(/lowest 1 of the 3 trials that reached step 5 go on/)).toBeInTheDocument()

    const table = screen.getByRole('table')
    const order = () => within(table).getAllByRole('row').slice(1).map((r) => within(r).getAllByRole('cell')[0].textContent)
    expect(order()).toEqual(['0', '1', '2', '3'])
    fireEvent.click(within(table).getByRole('button', { name: 'loss' }))
    expect(order()).toEqual(['1', '0', '2', '3'])  // the lowest loss first, a trial without one last
    expect(screen.getByRole('button', { name: 'Resume' })).toBeDisabled()
  })

  it('stops a running sweep and resumes a stopped one', async () => {
    const requests = mockFetch({
      ...csrfRoute(),
      'GET /api/sweeps/5': () => json(sweep()),
      'POST /api/sweeps/5/stop': () => json(sweep({ status: 'stopped', reason: 'stopped by admin' }), 202),
      ...Object.fromEntries([10, 11, 12, 13].map((id) => [`GET /api/jobs/${id}/metrics`, () => json({ ...metrics, job: id })])),
    })
    renderWithProviders(<Routes><Route path="/sweeps/:id" element={<SweepDetailPage />} /></Routes>, { path: '/sweeps/5' })
    fireEvent.click(await screen.findByRole('button', { name: 'Stop' }))
    await waitFor(() => expect(screen.getByRole('button', { name: 'Resume' })).toBeEnabled())
    expect(requests.some((r) => r.method === 'POST' && r.path === '/api/sweeps/5/stop')).toBe(true)
    expect(screen.getByRole('button', { name: 'Stop' })).toBeDisabled()
  })
})
