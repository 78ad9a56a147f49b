import { screen, waitFor, within } from '@testing-library/react'
import userEvent from '@testing-library/user-event'
import { describe, expect, it } from 'vitest'
import { csrfRoute, json, mockFetch } from '../../../test/http'
import { project } from '../../../test/queue-fixtures'
import { renderWithProviders } from '../../../test/render'
import { ProjectsPage } from './ProjectsPage'

const vision = project({ role: 'admin', priority_ceiling: 10, max_gpus: 8, max_processes: null, borrow: true, held: { gpus: 8, processes: 12 } })
const nlp = project({ id: 2, name: 'nlp', description: 'language models', role: 'member', priority_ceiling: 0, held: { gpus: 1, processes: 2 } })

function row(name: string) {
  return screen.getByRole('table', { name: 'Projects' }).querySelector(`tr[data-project="${name}"]`) as HTMLElement
}

describe('projects page', () => {
  it('shows each project’s priority ceiling and quotas against what it holds now', async () => {
    mockFetch({ 'GET /api/projects': () => json([vision, nlp]), 'GET /api/auth/me': () => json({ username: 'ada', is_staff: false, projects: [] }) })
    renderWithProviders(<ProjectsPage />)
    await screen.findByRole('table', { name: 'Projects' })

    const v = within(row('vision'))
    expect(v.getByText('high')).toHaveClass('prio-high')
    expect(v.getByLabelText('GPUs held of quota')).toHaveTextContent('8 of 8')
    expect(v.getByLabelText('Processes held of quota')).toHaveTextContent('12 (no limit)')
    expect(v.getByText('yes')).toBeInTheDocument()
    expect(v.getByRole('button', { name: 'Edit vision' })).toBeInTheDocument()

    const n = within(row('nlp'))
    expect(n.getByText('language models')).toBeInTheDocument()
    expect(n.getByText('normal')).toHaveClass('prio-normal')
    // A member sees the settings, an admin changes them.
    expect(n.queryByRole('button', { name: /Edit/ })).not.toBeInTheDocument()
  })

  it("lets a project's admin change its ceiling (staff set quotas) and shows the refusal", async () => {
    let answer = () => json({ priority_ceiling: ["a project's admins may set it up to 10 (high); above that, ask staff."] }, 400)
    const requests = mockFetch({
      ...csrfRoute(),
      'GET /api/projects': () => json([vision]),
      'GET /api/auth/me': () => json({ username: 'ada', is_staff: false, projects: ['vision'] }),
      'PATCH /api/projects/vision': () => answer(),
    })
    renderWithProviders(<ProjectsPage />)
    await userEvent.click(await screen.findByRole('button', { name: 'Edit vision' }))
    const form = screen.getByRole('form', { name: 'Settings of vision' })
    expect(within(form).getByRole('spinbutton', { name: 'Max GPUs' })).toBeDisabled()
    expect(within(form).getByRole('checkbox', { name: /borrow/ })).toBeDisabled()

    await userEvent.selectOptions(within(form).getByRole('combobox', { name: 'Priority ceiling' }), 'normal')
    await userEvent.click(within(form).getByRole('button', { name: 'Save' }))
    expect(await within(form).findByRole('alert')).toHaveTextContent('up to 10 (high)')

    answer = () => json({ ...vision, priority_ceiling: 0 })
    await userEvent.click(within(form).getByRole('button', { name: 'Save' }))
    await waitFor(() => expect(screen.queryByRole('form')).not.toBeInTheDocument())
    expect(within(row('vision')).getByText('normal')).toBeInTheDocument()
    expect(requests.filter((r) => r.method === 'PATCH').map((r) => r.body)).toEqual([{ priority_ceiling: 'normal' }, { priority_ceiling: 'normal' }])
  })

  it('lets staff set the quotas and borrowing, sending only what changed', async () => {
    const requests = mockFetch({
      ...csrfRoute(),
      'GET /api/projects': () => json([vision]),
      'GET /api/auth/me': () => json({ username: 'root', is_staff: true, projects: [] }),
      'PATCH /api/projects/vision': () => json({ ...vision, max_gpus: null, max_processes: 16, borrow: false }),
    })
    renderWithProviders(<ProjectsPage />)
    await userEvent.click(await screen.findByRole('button', { name: 'Edit vision' }))
    const form = screen.getByRole('form', { name: 'Settings of vision' })
    await userEvent.clear(within(form).getByRole('spinbutton', { name: 'Max GPUs' }))
    await userEvent.type(within(form).getByRole('spinbutton', { name: 'Max processes' }), '16')
    await userEvent.click(within(form).getByRole('checkbox', { name: /borrow/ }))
    await userEvent.click(within(form).getByRole('button', { name: 'Save' }))

    await waitFor(() => expect(screen.queryByRole('form')).not.toBeInTheDocument())
    expect(requests.find((r) => r.method === 'PATCH')!.body).toEqual({ max_gpus: null, max_processes: 16, borrow: false })
    expect(within(row('vision')).getByLabelText('GPUs held of quota')).toHaveTextContent('8 (no limit)')
    expect(within(row('vision')).getByLabelText('Processes held of quota')).toHaveTextContent('12 of 16')
  })
})
