import { screen, waitFor, within } from '@testing-library/react'
import userEvent from '@testing-library/user-event'
import { describe, expect, it } from 'vitest'
import { json, mockFetch, type RecordedRequest } from '../../../test/http'
import { goodputRollup, usage } from '../../../test/queue-fixtures'
import { renderWithProviders } from '../../../test/render'
import { formatHours, usageCharts } from '../usage-series'
import { UsagePage } from './UsagePage'

const query = (url: URL) => Object.fromEntries(url.searchParams)
const goodputRoute = { 'GET /api/usage/goodput': () => json(goodputRollup()) }
/** The requests of one route, in order. */
const of = (requests: RecordedRequest[], path: string) => requests.filter((r) => r.path === path)

describe('usage page', () => {
  it("shows each project's GPU- and process-hours over the last 7 days, a chart per project", async () => {
    const requests = mockFetch({ 'GET /api/usage': () => json(usage()), ...goodputRoute })
    renderWithProviders(<UsagePage />, { path: '/usage' })

    const table = await screen.findByRole('table', { name: 'Usage totals' })
    expect(query(of(requests, '/api/usage')[0].url)).toEqual({ by: 'project', since: '7d', bucket: 'day' })
    const rows = within(table).getAllByRole('row').map((r) => within(r).queryAllByRole('cell').map((c) => c.textContent))
    expect(rows.slice(1)).toEqual([
      ['vision', '10.00', '20.00', '3'],
      ['nlp', '0', '0.025', '1'],
      ['All', '10.00', '20.02', '4'],
    ])
    expect(within(table).getByRole('columnheader', { name: 'Project' })).toBeInTheDocument()
    expect(screen.getByTestId('usage-summary')).toHaveTextContent('10.00 GPU-hours, 20.02 process-hours in the last 7 days')
    // A chart per key, in the totals' order (happy-dom cannot draw them: their holders are there).
    const charts = within(screen.getByRole('region', { name: 'Usage' })).getAllByRole('img')
    expect(charts.map((img) => img.getAttribute('aria-label'))).toEqual(['vision usage chart', 'nlp usage chart'])
    expect(screen.getByRole('button', { name: 'By project' })).toHaveAttribute('aria-pressed', 'true')
    expect(screen.getByRole('button', { name: 'Last 7 days' })).toHaveAttribute('aria-pressed', 'true')
  })

  it('groups by user or machine and charts the last 24 hours by the hour, the choice in the URL', async () => {
    const requests = mockFetch({
      ...goodputRoute,
      'GET /api/usage': ({ url }) =>
        json(
          usage({
            by: (url.searchParams.get('by') ?? 'project') as 'project',
            totals: [{ key: 'ada', gpu_seconds: 7200, gpu_hours: 2, process_seconds: 7200, process_hours: 2, nodes: 2 }],
            series: [{ key: 'ada', gpu_hours: [1, 1, 0], process_hours: [1, 1, 0] }],
          }),
        ),
    })
    renderWithProviders(<UsagePage />, { path: '/usage' })
    await screen.findByRole('table', { name: 'Usage totals' })

    await userEvent.click(screen.getByRole('button', { name: 'By user' }))
    await waitFor(() => expect(query(of(requests, '/api/usage').at(-1)!.url)).toEqual({ by: 'user', since: '7d', bucket: 'day' }))
    await waitFor(() =>
      expect(within(screen.getByRole('table', { name: 'Usage totals' })).getByRole('columnheader', { name: 'User' })).toBeInTheDocument(),
    )
    expect(screen.getByTestId('location')).toHaveTextContent('/usage')

    await userEvent.click(screen.getByRole('button', { name: 'Last 24 hours' }))
    await waitFor(() => expect(query(of(requests, '/api/usage').at(-1)!.url)).toEqual({ by: 'user', since: '24h', bucket: 'hour' }))
    expect(screen.getByRole('button', { name: 'Last 24 hours' })).toHaveAttribute('aria-pressed', 'true')

    await userEvent.click(screen.getByRole('button', { name: 'By machine' }))
    await waitFor(() => expect(query(of(requests, '/api/usage').at(-1)!.url)).toEqual({ by: 'machine', since: '24h', bucket: 'hour' }))
    await waitFor(() =>
      expect(within(screen.getByRole('table', { name: 'Usage totals' })).getByRole('columnheader', { name: 'Machine' })).toBeInTheDocument(),
    )
  })

  it('says so when nothing was used', async () => {
    mockFetch({ 'GET /api/usage': () => json(usage({ totals: [], series: [] })), ...goodputRoute })
    renderWithProviders(<UsagePage />, { path: '/usage?window=30d' })
    expect(await screen.findByText(/^No GPU or process time was used in the last 30 days by your projects/)).toBeInTheDocument()
    expect(screen.queryByRole('table', { name: 'Usage totals' })).not.toBeInTheDocument()
  })
})

describe('goodput on the usage page', () => {
  it("shows each key's goodput, where its time went, GPU-hours and cost, by the page's grouping and window", async () => {
    const requests = mockFetch({ 'GET /api/usage': () => json(usage()), ...goodputRoute })
    renderWithProviders(<UsagePage />, { path: '/usage?by=machine&window=30d' })

    const table = await screen.findByRole('table', { name: 'Goodput' })
    expect(query(of(requests, '/api/usage/goodput')[0].url)).toEqual({ by: 'machine', since: '30d' })
    const rows = within(table).getAllByRole('row').map((r) => within(r).queryAllByRole('cell').map((c) => c.textContent))
    expect(rows.slice(1)).toEqual([
      ['vision', '60.0%', '', '16m 40s', '2.00', '1.50', '6.00', '1.50'],
      ['nlp', '0.0%', '', '1m 40s', '0', '0', '—', '—'],
      ['All', '54.5%', '', '18m 20s', '2.00', '1.50', '6.00', '1.50'],
    ])
    expect(within(table).getByRole('columnheader', { name: 'Machine' })).toBeInTheDocument()
    expect(within(table).getAllByRole('img')[0]).toHaveAttribute(
      'aria-label', 'vision: Queued 10.0%, Launch 5.0%, Training 60.0%, Checkpoint 5.0%, Lost work 20.0%')
    expect(screen.getByText(/jobs that ended in the last 30 days and those still running/)).toHaveTextContent(
      'without their waits for machines')
  })

  it('says so when no job ran', async () => {
    mockFetch({ 'GET /api/usage': () => json(usage()), 'GET /api/usage/goodput': () => json(goodputRollup({ rows: [] })) })
    renderWithProviders(<UsagePage />, { path: '/usage?window=24h' })
    expect(await screen.findByText('No job ran in the last 24 hours.')).toBeInTheDocument()
  })
})

describe('usage series', () => {
  it('lays out a chart per key with one line for GPU-hours and one for process-hours', () => {
    const [vision, nlp] = usageCharts(usage())
    const day = (d: number) => Date.parse(`2025-01-0${d}T00:00:00Z`) / 1000
    expect(vision.key).toBe('vision')
    expect(vision.series.map((s) => s.label)).toEqual(['GPU-hours', 'process-hours'])
    expect(vision.series[0].points).toEqual([
      { x: day(1), y: 4 },
      { x: day(2), y: 6 },
      { x: day(3), y: 0 },
    ])
    expect(nlp.series[1].points.at(-1)).toEqual({ x: day(3), y: 0.025 })
    expect(usageCharts(usage(), 1)).toHaveLength(1)
  })

  it('formats hours', () => {
    expect(formatHours(0)).toBe('0')
    expect(formatHours(0.0042)).toBe('0.0042')
    expect(formatHours(0.5)).toBe('0.50')
    expect(formatHours(3.14159)).toBe('3.14')
    expect(formatHours(512.34)).toBe('512.3')
    expect(formatHours(12_345.6)).toBe('12,346')
  })
})
