import { screen, within } from '@testing-library/react'
import userEvent from '@testing-library/user-event'
import { describe, expect, it } from 'vitest'
import { machine } from '../../../test/fixtures'
import { csrfRoute, json, mockFetch } from '../../../test/http'
import { renderWithProviders } from '../../../test/render'
import type { Machine } from '../../../lib/types'
import { MachinesPanel } from './MachinesPanel'

const staff = { 'GET /api/auth/me': () => json({ username: 'ada', is_staff: true, projects: ['default'] }) }

const created = (m: Machine) => json({ ...m, token: 'tok', agent_command: 'torchyard agent --server http://x --token tok' }, 201)

async function openForm() {
  renderWithProviders(<MachinesPanel />)
  const user = userEvent.setup()
  await user.click(await screen.findByRole('button', { name: 'Add machine' }))
  const form = screen.getByRole('form', { name: 'Add machine' })
  const type = async (label: string, text: string) => user.type(within(form).getByLabelText(label), text)
  return { user, form, type }
}

describe('add machine: the port, and Retry', () => {
  it('sends the port typed, checks it as typed, and shows it beside the host', async () => {
    const registered = [machine()]
    const requests = mockFetch({
      ...csrfRoute(),
      ...staff,
      'GET /api/machines': () => json(registered),
      'POST /api/machines': (r) => {
        const body = r.body as { name: string; host: string; port: number }
        const added = machine({ id: 7, status: 'pending', ...body })
        registered.push(added)
        return created(added)
      },
    })
    const { user, form, type } = await openForm()
    await type('Name', 'delta')
    await type('Host', 'fd00::7')
    const port = within(form).getByLabelText('Port')
    expect(port).toHaveAttribute('placeholder', '8001')
    await user.type(port, '70000')
    expect(within(form).getByRole('alert')).toHaveTextContent('a port number, 1 to 65535.')
    await user.clear(port)
    await user.type(port, '8338')
    expect(within(form).queryByRole('alert')).not.toBeInTheDocument()
    await user.click(within(form).getByRole('button', { name: 'Add' }))

    await screen.findByRole('button', { name: 'Done' })
    expect(requests.find((r) => r.method === 'POST')!.body).toEqual({ name: 'delta', host: 'fd00::7', port: 8338, labels: {} })
    expect(within(screen.getByRole('row', { name: 'delta' })).getByText('[fd00::7]:8338')).toBeInTheDocument()
  })

  it('leaves the port to the server when none is typed', async () => {
    const requests = mockFetch({
      ...csrfRoute(),
      ...staff,
      'GET /api/machines': () => json([machine()]),
      'POST /api/machines': () => created(machine({ id: 8, name: 'eps' })),
    })
    const { user, form, type } = await openForm()
    await type('Name', 'eps')
    await type('Host', '10.0.0.20')
    await user.click(within(form).getByRole('button', { name: 'Add' }))
    await screen.findByRole('button', { name: 'Done' })
    expect(requests.find((r) => r.method === 'POST')!.body).toEqual({ name: 'eps', host: '10.0.0.20', labels: {} })
  })

  it('keeps the form as typed after a network error, and Retry adds the same machine', async () => {
    let down = true
    const requests = mockFetch({
      ...csrfRoute(),
      ...staff,
      'GET /api/machines': () => json([machine()]),
      'POST /api/machines': (r) => {
        if (down) throw new TypeError('Failed to fetch')
        return created(machine({ id: 9, ...(r.body as object) }))
      },
    })
    const { user, form, type } = await openForm()
    await type('Name', 'zeta')
    await type('Host', '10.0.0.30')
    await type('Port', '9000')
    await user.click(within(form).getByRole('button', { name: 'Add' }))

    const alert = await within(form).findByText(/Could not add the machine: could not reach the server/)
    expect(within(form).getByLabelText('Name')).toHaveValue('zeta')
    expect(within(form).getByLabelText('Host')).toHaveValue('10.0.0.30')
    expect(within(form).getByLabelText('Port')).toHaveValue('9000')
    down = false
    await user.click(within(alert.closest('[role=alert]') as HTMLElement).getByRole('button', { name: 'Retry' }))
    await screen.findByRole('button', { name: 'Done' })
    const posts = requests.filter((r) => r.method === 'POST')
    expect(posts.map((r) => r.body)).toEqual([
      { name: 'zeta', host: '10.0.0.30', port: 9000, labels: {} },
      { name: 'zeta', host: '10.0.0.30', port: 9000, labels: {} },
    ])
  })

  it('offers Retry on the machine list when it could not load, and loads it on Retry', async () => {
    let down = true
    mockFetch({
      ...staff,
      'GET /api/machines': () => (down ? json({ detail: 'Bad gateway.' }, 502) : json([machine()])),
    })
    renderWithProviders(<MachinesPanel />)
    const user = userEvent.setup()
    // The query's own retries (twice, with backoff) are off in tests: the first failure shows.
    expect(await screen.findByText(/Could not load machines: Bad gateway\./)).toBeInTheDocument()
    down = false
    await user.click(screen.getByRole('button', { name: 'Retry' }))
    expect(await screen.findByRole('row', { name: 'alpha' })).toBeInTheDocument()
    expect(screen.queryByText(/Could not load machines/)).not.toBeInTheDocument()
  })
})
