import { screen, within } from '@testing-library/react'
import userEvent from '@testing-library/user-event'
import { describe, expect, it, vi } from 'vitest'
import { machine } from '../../../test/fixtures'
import { csrfRoute, json, mockFetch } from '../../../test/http'
import { renderWithProviders } from '../../../test/render'
import type { DistributedPreferences } from '../api/distributed-preferences'
import { initialFormState, preferencesOf, withPreferences } from '../new-job-spec'
import { NewJobForm } from './NewJobForm'

const saved: DistributedPreferences = {
  preferred_machines: [2, 1],
  preferred_machine_names: ['beta', 'alpha'],
  default_num_machines: 3,
  default_procs_per_machine: 4,
  default_gpus_per_machine: 1,
  auto_machine_selection: false,
  updated_at: '2026-01-02T10:00:00Z',
}
const never: DistributedPreferences = {
  preferred_machines: [],
  preferred_machine_names: [],
  default_num_machines: 2,
  default_procs_per_machine: 1,
  default_gpus_per_machine: 0,
  auto_machine_selection: true,
  updated_at: null,
}
const machines = [
  machine({ id: 1, name: 'alpha', capabilities: { gpu_count: 4 } }),
  machine({ id: 2, name: 'beta', capabilities: { gpu_count: 4 } }),
]
const routes = {
  ...csrfRoute(),
  'GET /api/plugins': () =>
    json([
      {
        name: 'mlp_ddp',
        version: '0.1.0',
        description: 'An MLP with DDP.',
        entrypoint: 'examples/mlp_ddp.py',
        default_config: {},
        builtin: true,
        bundle: null,
        created_at: null,
        project: null,
      },
    ]),
  'GET /api/machines': () => json(machines),
}

function renderForm() {
  return renderWithProviders(<NewJobForm onCreated={() => {}} onCancel={() => {}} />)
}

describe('new job form: the distributed defaults saved on the server', () => {
  it('starts from the saved defaults: counts, manual selection and the preferred machines in order', async () => {
    mockFetch({ ...routes, 'GET /api/preferences/distributed': () => json(saved) })
    renderForm()
    // Three machines turn distributed training on.
    await vi.waitFor(() => expect(screen.getByLabelText('Machines')).toHaveValue(3))
    expect(screen.getByRole('switch', { name: /Distributed training/ })).toBeChecked()
    expect(screen.getByLabelText('Processes/machine')).toHaveValue(4)
    expect(screen.getByLabelText('GPUs/machine')).toHaveValue(1)
    expect(screen.getByRole('radio', { name: 'Manual' })).toBeChecked()
    const beta = (await screen.findByText('beta')).closest('label')!
    expect(within(beta).getByRole('checkbox')).toBeChecked()
    expect(within(beta).getByText('master')).toBeInTheDocument()
    expect(within(screen.getByText('alpha').closest('label')!).getByRole('checkbox')).toBeChecked()
  })

  it('starts from one machine, any, with its saved single machine picked', async () => {
    const one = { ...saved, default_num_machines: 1, preferred_machines: [2], preferred_machine_names: ['beta'] }
    mockFetch({ ...routes, 'GET /api/preferences/distributed': () => json(one) })
    renderForm()
    await vi.waitFor(() => expect(screen.getByLabelText('Machine')).toHaveValue('beta'))
    expect(screen.getByRole('switch', { name: /Distributed training/ })).not.toBeChecked()
    expect(screen.queryByLabelText('Machines')).not.toBeInTheDocument()
  })

  it('keeps the built-in defaults for someone who never saved any', async () => {
    const requests = mockFetch({ ...routes, 'GET /api/preferences/distributed': () => json(never) })
    renderForm()
    await vi.waitFor(() => expect(requests.some((r) => r.path === '/api/preferences/distributed')).toBe(true))
    // One machine, any; distributed training brings back two.
    expect(screen.getByRole('switch', { name: /Distributed training/ })).not.toBeChecked()
    expect(screen.getByLabelText('Machine')).toHaveValue('')
    await userEvent.setup().click(screen.getByRole('switch', { name: /Distributed training/ }))
    expect(screen.getByLabelText('Machines')).toHaveValue(2)
    expect(screen.getByRole('radio', { name: 'Automatic' })).toBeChecked()
  })

  it('saves the distributed section as the defaults, machines by id in the order picked', async () => {
    const requests = mockFetch({
      ...routes,
      'GET /api/preferences/distributed': () => json(never),
      'PUT /api/preferences/distributed': (r) => json({ ...never, ...(r.body as object), updated_at: '2026-01-03T00:00:00Z' }),
    })
    renderForm()
    const user = userEvent.setup()
    await vi.waitFor(() => expect(requests.some((r) => r.path === '/api/preferences/distributed')).toBe(true))
    await user.click(screen.getByRole('switch', { name: /Distributed training/ }))
    await user.clear(screen.getByLabelText('Machines'))
    await user.type(screen.getByLabelText('Machines'), '4')
    await user.clear(screen.getByLabelText('GPUs/machine'))
    await user.type(screen.getByLabelText('GPUs/machine'), '2')
    await user.click(screen.getByRole('radio', { name: 'Manual' }))
    await user.click(within((await screen.findByText('beta')).closest('label')!).getByRole('checkbox'))
    await user.click(within(screen.getByText('alpha').closest('label')!).getByRole('checkbox'))
    await user.click(screen.getByRole('button', { name: 'Save as my defaults' }))

    expect(await screen.findByText(/Saved: new jobs start from these settings/)).toBeInTheDocument()
    const put = requests.find((r) => r.method === 'PUT')!
    expect(put.path).toBe('/api/preferences/distributed')
    expect(put.body).toEqual({
      preferred_machines: [2, 1],
      default_num_machines: 4,
      default_procs_per_machine: 1,
      default_gpus_per_machine: 2,
      auto_machine_selection: false,
    })
  })

  it('shows a refused save’s messages by the form’s names', async () => {
    mockFetch({
      ...routes,
      'GET /api/preferences/distributed': () => json(never),
      'PUT /api/preferences/distributed': () =>
        json({ default_num_machines: ['Ensure this value is greater than or equal to 1.'] }, 400),
    })
    renderForm()
    const user = userEvent.setup()
    await user.click(screen.getByRole('switch', { name: /Distributed training/ }))
    await user.clear(screen.getByLabelText('Machines'))
    await user.click(screen.getByRole('button', { name: 'Save as my defaults' }))
    expect(await screen.findByText('Machines: Ensure this value is greater than or equal to 1.')).toBeInTheDocument()
  })
})

describe('new job form: preferences to and from the form', () => {
  it('fills the distributed fields and only those', () => {
    const form = { ...initialFormState(), name: 'kept', nodes: '9' }
    expect(withPreferences(form, saved)).toEqual({
      ...form,
      distributed: true,
      nodes: '3',
      procs_per_node: '4',
      gpus_per_node: '1',
      selection: 'manual',
      machines: ['beta', 'alpha'],
    })
    expect(withPreferences(form, never)).toMatchObject({ distributed: true, selection: 'auto', machines: [] })
    // One machine: no distributed training, the machine count to turn it on again kept; the one preferred machine picked.
    const one = { ...saved, default_num_machines: 1, preferred_machine_names: ['beta'] }
    expect(withPreferences(form, one)).toMatchObject({ distributed: false, nodes: '9', machine: 'beta' })
    expect(withPreferences(form, { ...one, auto_machine_selection: true })).toMatchObject({ distributed: false, machine: '' })
  })

  it('names machines by id and leaves out one no longer in the cluster', () => {
    const form = { ...initialFormState(), distributed: true, machines: ['beta', 'gone', 'alpha'], selection: 'manual' as const }
    expect(preferencesOf(form, machines)).toEqual({
      preferred_machines: [2, 1],
      default_num_machines: 2,
      default_procs_per_machine: 1,
      default_gpus_per_machine: 0,
      auto_machine_selection: false,
    })
  })

  it('saves one machine without distributed training: the picked one, or any', () => {
    const form = { ...initialFormState(), machine: 'beta', machines: ['alpha'] }
    expect(preferencesOf(form, machines)).toMatchObject({ preferred_machines: [2], default_num_machines: 1, auto_machine_selection: false })
    expect(preferencesOf({ ...form, machine: '' }, machines)).toMatchObject({
      preferred_machines: [1],
      default_num_machines: 1,
      auto_machine_selection: true,
    })
  })
})
