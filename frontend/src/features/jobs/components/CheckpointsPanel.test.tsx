import { screen, within } from '@testing-library/react'
import { afterEach, describe, expect, it, vi } from 'vitest'
import type { components } from '../../../lib/api-schema'
import { json, mockFetch } from '../../../test/http'
import { renderWithProviders } from '../../../test/render'
import { CheckpointsPanel } from './CheckpointsPanel'

type Checkpoint = components['schemas']['CheckpointOut']

const checkpoint = (over: Partial<Checkpoint>): Checkpoint => ({
  id: 1, job: 5, step: 100, attempt: 0, tier: 'disk', uri: 'file:///ckpt/step-00000100/manifest.json', world_size: 2,
  files: [{ path: 'state.pt', size: 1024, sha256: 'ab' }], total_bytes: 1024, committed_at: '2026-11-22T00:00:00Z',
  verified: true, saved_async: false, blocking_seconds: null, background_seconds: null, ...over,
})

afterEach(() => vi.unstubAllGlobals())

describe('CheckpointsPanel', () => {
  it("shows how long each save blocked training and how long it ran in the background", async () => {
    mockFetch({
      'GET /api/jobs/5/checkpoints': () => json([
        checkpoint({ id: 1, step: 100, blocking_seconds: 2.5 }),
        checkpoint({ id: 2, step: 200, saved_async: true, blocking_seconds: 0.041, background_seconds: 2.346 }),
        checkpoint({ id: 3, step: 300, saved_async: true, blocking_seconds: 0.05, background_seconds: 95 }),
      ]),
    })
    renderWithProviders(<CheckpointsPanel jobId={5} seen={0} />)

    const rows = await screen.findAllByRole('row')
    const cells = (step: number) => within(rows.find((r) => r.textContent?.startsWith(String(step)))!).getAllByRole('cell')
    expect(within(rows[0]).getByText('Blocked')).toBeInTheDocument()
    expect(cells(200).map((c) => c.textContent)).toEqual(expect.arrayContaining(['0.04 s', '2.35 s']))
    expect(cells(100).map((c) => c.textContent)).toEqual(expect.arrayContaining(['2.50 s', 'sync']))
    expect(cells(300).map((c) => c.textContent)).toEqual(expect.arrayContaining(['0.05 s', '1m 35s']))
  })

  it('says where each checkpoint is kept: the store, or the memory of the machines holding it', async () => {
    mockFetch({
      'GET /api/jobs/5/checkpoints': () => json([
        checkpoint({ id: 1, step: 100 }),
        checkpoint({
          id: 2, step: 101, tier: 'memory', uri: 'memory://job-5/step-101',
          files: [{ path: 'state.pt', size: 1024, sha256: 'ab', holders: ['gpu-1', 'gpu-2'] }],
        }),
      ]),
    })
    renderWithProviders(<CheckpointsPanel jobId={5} seen={0} />)
    const rows = await screen.findAllByRole('row')
    const row = (step: number) => rows.find((r) => r.textContent?.startsWith(String(step)))!
    expect(within(row(101)).getByText('memory: gpu-1, gpu-2')).toBeInTheDocument()
    expect(within(row(101)).queryByRole('link')).toBeNull()
    expect(within(row(100)).getByText('store')).toBeInTheDocument()
    expect(within(row(100)).getByRole('link', { name: 'state.pt' })).toBeInTheDocument()
  })

  it('shows a dash for checkpoints saved before saves were timed', async () => {
    mockFetch({ 'GET /api/jobs/5/checkpoints': () => json([checkpoint({})]) })
    renderWithProviders(<CheckpointsPanel jobId={5} seen={0} />)
    const row = (await screen.findAllByRole('row'))[1]
    expect(within(row).getAllByText('—')).toHaveLength(2)
  })
})
