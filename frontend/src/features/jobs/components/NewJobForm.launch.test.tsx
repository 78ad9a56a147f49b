import { screen, within } from '@testing-library/react'
import userEvent from '@testing-library/user-event'
import { describe, expect, it, vi } from 'vitest'
import type { ExecutionPlan } from '../../../lib/types'
import { jobDetail, machine } from '../../../test/fixtures'
import { csrfRoute, json, mockFetch } from '../../../test/http'
import { renderWithProviders } from '../../../test/render'
import type { Plugin } from '../api/get-plugins'
import { NewJobForm } from './NewJobForm'

const builtin: Plugin = {
  name: 'mlp_ddp',
  version: '1.0',
  description: 'An MLP with DDP.',
  entrypoint: 'examples/mlp_ddp.py',
  default_config: {},
  builtin: true,
  bundle: null,
  created_at: null,
  project: null,
}
const uploaded: Plugin = {
  name: 'llama_trainer',
  version: '0.3.1',
  description: 'Fine-tunes a llama.',
  entrypoint: 'main.py',
  default_config: { batch_size: 32, lr: 0.0002, epochs: 3, model: 'tiny' },
  builtin: false,
  bundle: 'ab'.repeat(32),
  created_at: '2026-11-01T10:00:00Z',
  project: 'default',
}

const onePlan: ExecutionPlan = {
  world_size: 2,
  nnodes: 1,
  procs_per_node: 2,
  master_addr: '10.0.0.12',
  master_port: 29500,
  backend: 'gloo',
  nodes: [{ node_rank: 0, machine_id: 2, machine_name: 'beta', host: '10.0.0.12', nproc: 2, rank_start: 0, rank_end: 1, gpus: [] }],
  hyperparameters: { world_size: 2, rank: 0 },
  warnings: [],
  skipped: [],
}

const routes = {
  ...csrfRoute(),
  'GET /api/plugins': () => json([builtin, uploaded]),
  'GET /api/machines': () =>
    json([
      machine({ id: 1, name: 'alpha' }),
      machine({ id: 2, name: 'beta', capabilities: { gpu_count: 2 } }),
      machine({ id: 3, name: 'gamma', status: 'offline' }),
    ]),
}

function renderForm(onCreated = vi.fn()) {
  renderWithProviders(<NewJobForm onCreated={onCreated} onCancel={() => {}} />)
  return { user: userEvent.setup(), onCreated }
}

const planBody = (requests: { path: string; body: unknown }[], index = 0) =>
  requests.filter((r) => r.path === '/api/jobs/plan')[index].body as Record<string, unknown>

describe('new job form: one machine, plugins, and retry', () => {
  it('runs a job on one picked machine through the seed’s remote dispatch', async () => {
    const requests = mockFetch({
      ...routes,
      'POST /api/jobs/plan': () => json(onePlan),
      'POST /api/network/machines/2/dispatch_job': () => json({ job_id: 9, status: 'queued' }, 201),
      'GET /api/jobs/9': () => json(jobDetail({ id: 9 })),
    })
    const { user, onCreated } = renderForm()
    await user.type(screen.getByLabelText('Name'), 'solo')
    // Off by default: no machine count, a single-machine choice of the online machines.
    expect(screen.getByRole('switch', { name: /Distributed training/ })).not.toBeChecked()
    expect(screen.queryByLabelText('Machines')).not.toBeInTheDocument()
    const picker = screen.getByLabelText('Machine')
    expect(await within(picker).findByRole('option', { name: /beta · 2 of 2 GPUs free/ })).toBeInTheDocument()
    expect(within(picker).queryByRole('option', { name: /gamma/ })).not.toBeInTheDocument()
    await user.selectOptions(picker, 'beta')
    await user.clear(screen.getByLabelText('Processes/machine'))
    await user.type(screen.getByLabelText('Processes/machine'), '2')
    await user.click(screen.getByRole('button', { name: 'Plan' }))

    await screen.findByRole('region', { name: 'Execution plan' })
    const spec = planBody(requests)
    expect(spec.resources).toEqual({ nodes: 1, procs_per_node: 2, gpus_per_node: 0, min_gpu_memory: 0 })
    expect(spec.placement).toEqual({ policy: 'pack', machines: ['beta'] })
    await user.click(screen.getByRole('button', { name: 'Launch' }))
    await vi.waitFor(() => expect(onCreated).toHaveBeenCalled())
    expect(onCreated.mock.calls[0][0].id).toBe(9)
    expect(requests.find((r) => r.path === '/api/network/machines/2/dispatch_job')!.body).toEqual(spec)
    expect(requests.some((r) => r.method === 'POST' && r.path === '/api/jobs')).toBe(false)
  })

  it('leaves the machine to the planner when none is picked, and launches with POST /api/jobs', async () => {
    const requests = mockFetch({
      ...routes,
      'POST /api/jobs/plan': () => json(onePlan),
      'POST /api/jobs': () => json(jobDetail({ id: 4 }), 201),
    })
    const { user, onCreated } = renderForm()
    await user.type(screen.getByLabelText('Name'), 'anywhere')
    await user.click(screen.getByRole('button', { name: 'Plan' }))
    await user.click(await screen.findByRole('button', { name: 'Launch' }))
    await vi.waitFor(() => expect(onCreated).toHaveBeenCalled())
    const spec = planBody(requests)
    expect(spec).toMatchObject({ resources: { nodes: 1 }, placement: { policy: 'pack', machines: [] } })
    expect(requests.find((r) => r.method === 'POST' && r.path === '/api/jobs')!.body).toEqual(spec)
  })

  it('lists the plugins and fills the entrypoint, code and config of the one picked', async () => {
    const requests = mockFetch({ ...routes, 'POST /api/jobs/plan': () => json(onePlan) })
    const { user } = renderForm()
    await user.type(screen.getByLabelText('Name'), 'llama')
    const plugin = screen.getByLabelText('Plugin')
    expect(await within(plugin).findByRole('option', { name: 'llama_trainer v0.3.1' })).toBeInTheDocument()
    expect(plugin).toHaveValue('mlp_ddp')
    await user.selectOptions(plugin, 'llama_trainer')

    expect(screen.getByText('Fine-tunes a llama.')).toBeInTheDocument()
    expect(screen.getByLabelText('Batch size')).toHaveValue(32)
    expect(screen.getByLabelText('Learning rate')).toHaveValue(0.0002)
    expect(JSON.parse((screen.getByLabelText('Config (JSON)') as HTMLTextAreaElement).value)).toEqual({ epochs: 3, model: 'tiny' })
    // A plugin reads its config, not the recipes' --steps.
    expect(screen.queryByLabelText('Steps')).not.toBeInTheDocument()
    await user.click(screen.getByRole('button', { name: 'Plan' }))

    await screen.findByRole('region', { name: 'Execution plan' })
    expect(planBody(requests)).toMatchObject({
      entrypoint: 'main.py',
      code: { bundle: uploaded.bundle },
      distributed: { launcher: 'accelerate' },
      args: [],
      hyperparameters: { epochs: 3, model: 'tiny', batch_size: 32, lr: 0.0002 },
    })
  })

  it('refuses a config that is not a JSON object before sending anything', async () => {
    const requests = mockFetch({ ...routes })
    const { user } = renderForm()
    await user.type(screen.getByLabelText('Name'), 'bad-config')
    await user.type(screen.getByLabelText('Config (JSON)'), '[[1, 2]')
    expect(screen.getByLabelText('Config (JSON)').closest('.field')).toHaveTextContent('a JSON object')
    await user.click(screen.getByRole('button', { name: 'Plan' }))
    expect(requests.some((r) => r.path === '/api/jobs/plan')).toBe(false)
  })

  it('offers Retry when the plan gets no answer, keeping what was typed, and plans on Retry', async () => {
    let down = true
    const requests = mockFetch({
      ...routes,
      'POST /api/jobs/plan': () => {
        if (down) throw new TypeError('Failed to fetch')
        return json(onePlan)
      },
    })
    const { user } = renderForm()
    await user.type(screen.getByLabelText('Name'), 'flaky')
    await user.click(screen.getByRole('button', { name: 'Plan' }))

    const alert = await screen.findByText(/Could not plan the job: could not reach the server \(Failed to fetch\)/)
    expect(screen.getByLabelText('Name')).toHaveValue('flaky')
    down = false
    await user.click(within(alert.closest('[role=alert]') as HTMLElement).getByRole('button', { name: 'Retry' }))
    await screen.findByRole('region', { name: 'Execution plan' })
    expect(screen.queryByText(/could not reach the server/)).not.toBeInTheDocument()
    const plans = requests.filter((r) => r.path === '/api/jobs/plan')
    expect(plans).toHaveLength(2)
    expect(plans[1].body).toEqual(plans[0].body)
  })

  it('retries a launch that met a server error with the same spec', async () => {
    let failures = 1
    const requests = mockFetch({
      ...routes,
      'POST /api/jobs/plan': () => json(onePlan),
      'POST /api/jobs': () => (failures-- > 0 ? json({ detail: 'Server error.' }, 502) : json(jobDetail({ id: 5 }), 201)),
    })
    const { user, onCreated } = renderForm()
    await user.type(screen.getByLabelText('Name'), 'retry-launch')
    await user.click(screen.getByRole('button', { name: 'Plan' }))
    await user.click(await screen.findByRole('button', { name: 'Launch' }))
    expect(await screen.findByText(/Could not launch the job: Server error\./)).toBeInTheDocument()
    await user.click(screen.getByRole('button', { name: 'Retry' }))
    await vi.waitFor(() => expect(onCreated).toHaveBeenCalled())
    const launches = requests.filter((r) => r.method === 'POST' && r.path === '/api/jobs')
    expect(launches).toHaveLength(2)
    expect(launches[1].body).toEqual(launches[0].body)
  })

  it('offers no Retry for a refusal that would only be refused again', async () => {
    mockFetch({ ...routes, 'POST /api/jobs/plan': () => json({ detail: 'You may not submit to this project.' }, 403) })
    const { user } = renderForm()
    await user.type(screen.getByLabelText('Name'), 'not-mine')
    await user.click(screen.getByRole('button', { name: 'Plan' }))
    expect(await screen.findByText(/You may not submit to this project\./)).toBeInTheDocument()
    expect(screen.queryByRole('button', { name: 'Retry' })).not.toBeInTheDocument()
  })
})
