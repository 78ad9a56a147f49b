import { screen, within } from '@testing-library/react'
import userEvent from '@testing-library/user-event'
import { describe, expect, it, vi } from 'vitest'
import { machine } from '../../../test/fixtures'
import { csrfRoute, json, mockFetch } from '../../../test/http'
import { renderWithProviders } from '../../../test/render'
import { MachinesPanel } from './MachinesPanel'

describe('machines', () => {
  it('lists machines and, after adding one, shows its one-time agent command', async () => {
    const registered = [machine()]
    const beta = machine({ id: 2, name: 'beta', host: '10.0.0.12', status: 'pending', capabilities: {}, current_load: {}, last_heartbeat: null })
    const requests = mockFetch({
      ...csrfRoute(),
      'GET /api/machines': () => json(registered),
      'POST /api/machines': () => {
        registered.push(beta)
        return json({ ...beta, token: 'tok-secret' }, 201)
      },
    })
    renderWithProviders(<MachinesPanel />)

    const alphaRow = (await screen.findByText('alpha')).closest('tr')!
    expect(within(alphaRow).getByText('online')).toHaveClass('badge-online')
    expect(within(alphaRow).getByText('10.0.0.11')).toBeInTheDocument()
    expect(within(alphaRow).getByText('64.0')).toBeInTheDocument()

    const user = userEvent.setup()
    await user.click(screen.getByRole('button', { name: 'Add machine' }))
    await user.type(screen.getByLabelText('Name'), 'beta')
    await user.type(screen.getByLabelText('Host'), '10.0.0.12')
    await user.click(screen.getByRole('button', { name: 'Add' }))

    expect(await screen.findByText(`torchyard agent --server ${window.location.origin} --token tok-secret`)).toBeInTheDocument()
    expect(requests.find((r) => r.method === 'POST')!.body).toEqual({ name: 'beta', host: '10.0.0.12' })
    // The new (pending, not yet reporting) machine is in the table too.
    expect(within(screen.getByText('beta', { selector: 'td' }).closest('tr')!).getByText('pending')).toBeInTheDocument()

    await user.click(screen.getByRole('button', { name: 'Done' }))
    expect(screen.queryByText(/tok-secret/)).not.toBeInTheDocument()
  })

  it("shows which projects take each machine's GPUs and processes", async () => {
    mockFetch({
      ...csrfRoute(),
      'GET /api/machines': () =>
        json([
          machine({ usage: [{ project: 'nlp', gpus: 0, processes: 1 }, { project: 'vision', gpus: 2, processes: 4 }] }),
          machine({ id: 2, name: 'beta' }),
        ]),
    })
    renderWithProviders(<MachinesPanel />)
    const alphaRow = (await screen.findByText('alpha')).closest('tr')!
    expect(within(alphaRow).getByText('nlp: 1 process; vision: 2 GPUs, 4 processes')).toBeInTheDocument()
    expect(within(screen.getByText('beta').closest('tr')!).getByText('—')).toBeInTheDocument()
  })

  it('deletes a machine only after confirmation', async () => {
    const requests = mockFetch({
      ...csrfRoute(),
      'GET /api/machines': () => json([machine()]),
      'DELETE /api/machines/1': () => new Response(null, { status: 204 }),
    })
    const confirm = vi.spyOn(window, 'confirm').mockReturnValueOnce(false).mockReturnValueOnce(true)
    renderWithProviders(<MachinesPanel />)
    const user = userEvent.setup()
    await user.click(await screen.findByRole('button', { name: 'Delete' }))
    expect(requests.some((r) => r.method === 'DELETE')).toBe(false)

    await user.click(screen.getByRole('button', { name: 'Delete' }))
    await vi.waitFor(() => expect(screen.queryByText('alpha')).not.toBeInTheDocument())
    expect(confirm).toHaveBeenCalledTimes(2)
    expect(requests.filter((r) => r.method === 'DELETE').map((r) => r.path)).toEqual(['/api/machines/1'])
  })
})
