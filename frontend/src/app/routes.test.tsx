import { screen, waitFor } from '@testing-library/react'
import userEvent from '@testing-library/user-event'
import { describe, expect, it, vi } from 'vitest'
import { FakeWebSocket } from '../test/fake-websocket'
import { jobSummary, machine } from '../test/fixtures'
import { csrfRoute, json, mockFetch } from '../test/http'
import { renderWithProviders } from '../test/render'
import { AppRoutes } from './routes'

describe('app shell', () => {
  it('shows machines and jobs on the overview, follows the cluster stream, and logs out', async () => {
    vi.stubGlobal('WebSocket', FakeWebSocket)
    const requests = mockFetch({
      ...csrfRoute(),
      'GET /api/auth/me': () => json({ username: 'ada', is_staff: true }),
      'GET /api/machines': () => json([machine()]),
      'GET /api/jobs': () => json([jobSummary()]),
      'POST /api/auth/logout': () => new Response(null, { status: 204 }),
    })
    renderWithProviders(<AppRoutes />, { path: '/' })

    expect(await screen.findByRole('heading', { name: 'Machines' })).toBeInTheDocument()
    expect(screen.getByRole('heading', { name: 'Jobs' })).toBeInTheDocument()
    expect(await screen.findByText('alpha')).toBeInTheDocument()
    expect(await screen.findByRole('link', { name: 'mnist-ddp' })).toBeInTheDocument()
    expect(screen.getByText('ada')).toBeInTheDocument()
    expect((await waitFor(() => FakeWebSocket.latest())).target).toBe('/api/cluster/stream')

    await userEvent.click(screen.getByRole('button', { name: 'Log out' }))
    expect(await screen.findByRole('button', { name: 'Sign in' })).toBeInTheDocument()
    expect(requests.some((r) => r.method === 'POST' && r.path === '/api/auth/logout')).toBe(true)
    // Leaving the shell closes the cluster stream. React runs effect clean-ups after the commit
    // that shows the login page, so wait for it rather than reading it in the same tick.
    await waitFor(() => expect(FakeWebSocket.instances.every((s) => s.closedByClient)).toBe(true))
  })
})
