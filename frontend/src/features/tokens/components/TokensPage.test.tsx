import { screen, within } from '@testing-library/react'
import userEvent from '@testing-library/user-event'
import { describe, expect, it, vi } from 'vitest'
import { csrfRoute, json, mockFetch } from '../../../test/http'
import { renderWithProviders } from '../../../test/render'
import type { ApiToken } from '../api/get-tokens'
import { TokensPage } from './TokensPage'

function token(overrides: Partial<ApiToken> = {}): ApiToken {
  return {
    id: 1,
    name: 'laptop',
    prefix: 'a1b2c3d4',
    created: '2026-01-02T10:00:00Z',
    expiry: null,
    last_used: null,
    ...overrides,
  }
}

describe('API tokens', () => {
  it('lists tokens by name and first characters, never in full', async () => {
    mockFetch({
      ...csrfRoute(),
      'GET /api/auth/tokens': () => json([token(), token({ id: 2, name: 'CI', last_used: '2026-01-03T10:00:00Z' })]),
    })
    renderWithProviders(<TokensPage />)
    const laptop = (await screen.findByText('laptop')).closest('tr')!
    expect(within(laptop).getByText('a1b2c3d4…')).toBeInTheDocument()
    expect(within(laptop).getAllByText('never')).toHaveLength(2) // expires, last used
    expect(within(screen.getByText('CI').closest('tr')!).getAllByText('never')).toHaveLength(1)
  })

  it('creates a token and shows it once, with a copy button', async () => {
    const requests = mockFetch({
      ...csrfRoute(),
      'GET /api/auth/tokens': () => json([token()]),
      'POST /api/auth/tokens': () =>
        json({ ...token({ id: 2, name: 'CI', prefix: 'ffee0011', expiry: '2026-02-01T10:00:00Z' }), token: 'ffee0011-secret', username: 'alice' }, 201),
    })
    renderWithProviders(<TokensPage />)
    await screen.findByText('laptop')

    const user = userEvent.setup()
    await user.click(screen.getByRole('button', { name: 'New token' }))
    await user.type(screen.getByLabelText('Name'), 'CI')
    await user.selectOptions(screen.getByLabelText('Expires'), 'In 30 days')
    await user.click(screen.getByRole('button', { name: 'Create' }))

    expect(await screen.findByText('ffee0011-secret')).toBeInTheDocument()
    expect(requests.find((r) => r.method === 'POST')!.body).toEqual({ name: 'CI', expires_in_days: 30 })
    await user.click(screen.getByRole('button', { name: 'Copy' }))
    expect(await navigator.clipboard.readText()).toBe('ffee0011-secret') // user-event's clipboard
    expect(await screen.findByRole('button', { name: 'Copied' })).toBeInTheDocument()
    // Listed with the others, by its start only.
    expect(within(screen.getByText('CI', { selector: 'td' }).closest('tr')!).getByText('ffee0011…')).toBeInTheDocument()

    await user.click(screen.getByRole('button', { name: 'Done' }))
    expect(screen.queryByText(/ffee0011-secret/)).not.toBeInTheDocument()
  })

  it("shows the server's field errors", async () => {
    mockFetch({
      ...csrfRoute(),
      'GET /api/auth/tokens': () => json([]),
      'POST /api/auth/tokens': () => json({ name: ['Ensure this field has no more than 100 characters.'] }, 400),
    })
    renderWithProviders(<TokensPage />)
    expect(await screen.findByText(/No API tokens/)).toBeInTheDocument()
    const user = userEvent.setup()
    await user.click(screen.getByRole('button', { name: 'New token' }))
    await user.type(screen.getByLabelText('Name'), 'x')
    await user.click(screen.getByRole('button', { name: 'Create' }))
    expect(await screen.findByText('Ensure this field has no more than 100 characters.')).toBeInTheDocument()
  })

  it('revokes a token only after confirmation', async () => {
    const requests = mockFetch({
      ...csrfRoute(),
      'GET /api/auth/tokens': () => json([token()]),
      'DELETE /api/auth/tokens/1': () => new Response(null, { status: 204 }),
    })
    const confirm = vi.fn().mockReturnValueOnce(false).mockReturnValueOnce(true)
    vi.stubGlobal('confirm', confirm)
    renderWithProviders(<TokensPage />)
    const user = userEvent.setup()
    await user.click(await screen.findByRole('button', { name: 'Revoke' }))
    expect(requests.some((r) => r.method === 'DELETE')).toBe(false)

    await user.click(screen.getByRole('button', { name: 'Revoke' }))
    await vi.waitFor(() => expect(screen.queryByText('laptop')).not.toBeInTheDocument())
    expect(confirm).toHaveBeenCalledTimes(2)
    expect(requests.filter((r) => r.method === 'DELETE').map((r) => r.path)).toEqual(['/api/auth/tokens/1'])
    vi.unstubAllGlobals()
  })
})
