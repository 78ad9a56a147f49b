import { screen, within } from '@testing-library/react'
import userEvent from '@testing-library/user-event'
import { describe, expect, it, vi } from 'vitest'
import type { ExecutionPlan } from '../../../lib/types'
import { jobDetail, machine } from '../../../test/fixtures'
import { csrfRoute, json, mockFetch } from '../../../test/http'
import { renderWithProviders } from '../../../test/render'
import { NewJobForm } from './NewJobForm'

const builtin = (name: string, description: string) => ({
  name,
  version: '0.1.0',
  description,
  entrypoint: `examples/${name}.py`,
  default_config: {},
  builtin: true,
  bundle: null,
  created_at: null,
  project: null,
})

// The built-in recipes, as GET /api/plugins lists them.
const recipesRoute = {
  'GET /api/plugins': () =>
    json([builtin('char_gpt', 'A character-level transformer.'), builtin('mlp_ddp', 'An MLP with DDP.')]),
  'GET /api/machines': () => json([machine({ id: 1, name: 'alpha' }), machine({ id: 2, name: 'beta' })]),
}

const distributedSwitch = () => screen.getByRole('switch', { name: /Distributed training/ })

const plan: ExecutionPlan = {
  world_size: 4,
  nnodes: 2,
  procs_per_node: 2,
  master_addr: '10.0.0.11',
  master_port: 29500,
  backend: 'gloo',
  nodes: [
    { node_rank: 0, machine_id: 1, machine_name: 'alpha', host: '10.0.0.11', nproc: 2, rank_start: 0, rank_end: 1, gpus: [] },
    { node_rank: 1, machine_id: 2, machine_name: 'beta', host: '10.0.0.12', nproc: 2, rank_start: 2, rank_end: 3, gpus: [] },
  ],
  hyperparameters: { batch_size: 16, world_size: 4, rank: 0, global_batch_size: 64 },
  warnings: [],
  skipped: [{ machine_id: 3, machine_name: 'gamma', reason: 'draining' }],
  preflight: { master: '10.0.0.11:29500', versions: { alpha: 'torch 2.5.1 on Python 3.12.3', beta: 'torch 2.5.1 on Python 3.12.3' } },
}

function fieldOf(label: string): HTMLElement {
  return screen.getByLabelText(label).closest('.field') as HTMLElement
}

async function typeInto(user: ReturnType<typeof userEvent.setup>, label: string, text: string) {
  await user.clear(screen.getByLabelText(label))
  await user.type(screen.getByLabelText(label), text)
}

describe('new job form', () => {
  it('plans the JobSpec built from the form, shows the plan, then launches exactly that spec', async () => {
    const requests = mockFetch({
      ...csrfRoute(),
      ...recipesRoute,
      'POST /api/jobs/plan': () => json(plan),
      'POST /api/jobs': () => json(jobDetail({ id: 9 }), 201),
    })
    const onCreated = vi.fn()
    renderWithProviders(<NewJobForm onCreated={onCreated} onCancel={() => {}} />)
    const user = userEvent.setup()

    await user.type(screen.getByLabelText('Name'), 'gpt-run')
    // The server's recipes fill the plugin list, each with its summary as the hint.
    expect(await screen.findByRole('option', { name: 'char_gpt v0.1.0 (built-in)' })).toHaveAttribute(
      'title',
      'A character-level transformer.',
    )
    expect(screen.getByLabelText('Plugin')).toHaveValue('mlp_ddp')
    expect(screen.getByText('An MLP with DDP.')).toBeInTheDocument()
    await user.selectOptions(screen.getByLabelText('Plugin'), 'char_gpt')
    expect(screen.getByText('A character-level transformer.')).toBeInTheDocument()
    expect(screen.queryByText('An MLP with DDP.')).not.toBeInTheDocument()
    await typeInto(user, 'Steps', '1200')
    await user.click(distributedSwitch())
    expect(screen.getByLabelText('Machines')).toHaveValue(2)
    await typeInto(user, 'Processes/machine', '2')
    await typeInto(user, 'GPUs/machine', '1')
    await typeInto(user, 'Min GPU memory (GB)', '40')
    await typeInto(user, 'Max restarts', '5')
    await user.selectOptions(screen.getByLabelText('Placement'), 'spread')
    await user.type(screen.getByLabelText('Batch size'), '64')
    await user.click(screen.getByRole('button', { name: 'Add argument' }))
    await user.type(screen.getByLabelText('Argument 1'), '--fp16')
    await user.click(screen.getByRole('button', { name: 'Add variable' }))
    await user.type(screen.getByLabelText('Variable 1 name'), 'NCCL_DEBUG')
    await user.type(screen.getByLabelText('Variable 1 value'), 'INFO')
    // An empty row is left out of the spec.
    await user.click(screen.getByRole('button', { name: 'Add variable' }))
    expect(screen.queryByRole('button', { name: 'Launch' })).not.toBeInTheDocument()
    await user.click(screen.getByRole('button', { name: 'Plan' }))

    const shown = await screen.findByRole('region', { name: 'Execution plan' })
    expect(within(shown).getByText('alpha', { selector: 'td' }).closest('tr')).toHaveTextContent('ranks 0–1')
    expect(within(shown).getByRole('list', { name: 'Skipped machines' })).toHaveTextContent('gamma: draining')
    const spec = {
      name: 'gpt-run',
      entrypoint: 'examples/char_gpt.py',
      args: ['--steps', '1200', '--fp16'],
      env: { NCCL_DEBUG: 'INFO' },
      resources: { nodes: 2, procs_per_node: 2, gpus_per_node: 1, min_gpu_memory: 40960 },
      placement: { policy: 'spread', machines: [] },
      hyperparameters: { batch_size: 64 },
      scaling: { mode: 'keep_global_batch' },
      fault_tolerance: { max_restarts: 5 },
    }
    expect(requests.find((r) => r.path === '/api/jobs/plan')!.body).toEqual(spec)
    expect(requests.some((r) => r.path === '/api/jobs')).toBe(false)

    await user.click(screen.getByRole('button', { name: 'Launch' }))
    await vi.waitFor(() => expect(onCreated).toHaveBeenCalled())
    expect(onCreated.mock.calls[0][0].id).toBe(9)
    expect(requests.find((r) => r.method === 'POST' && r.path === '/api/jobs')!.body).toEqual(spec)
    // Typing into every field of the form, key by key, is slow on a loaded machine.
  }, 30_000)

  it('takes Launch away when the form changes after planning', async () => {
    mockFetch({ ...csrfRoute(), ...recipesRoute, 'POST /api/jobs/plan': () => json(plan) })
    renderWithProviders(<NewJobForm onCreated={() => {}} onCancel={() => {}} />)
    const user = userEvent.setup()
    await user.type(screen.getByLabelText('Name'), 'run')
    await user.click(screen.getByRole('button', { name: 'Plan' }))
    expect(await screen.findByRole('button', { name: 'Launch' })).toBeInTheDocument()
    await user.click(distributedSwitch())
    expect(screen.queryByRole('button', { name: 'Launch' })).not.toBeInTheDocument()
    expect(screen.getByText(/plan again before launching/)).toBeInTheDocument()
  })

  it('places on the machines picked by hand, the first as master, showing their free GPUs', async () => {
    const requests = mockFetch({
      ...csrfRoute(),
      ...recipesRoute,
      'GET /api/machines': () =>
        json([
          machine({ id: 1, name: 'alpha', capabilities: { gpu_count: 4 }, usage: [{ project: 'x', gpus: 3, processes: 3 }] }),
          machine({ id: 2, name: 'beta', capabilities: { gpu_count: 2 } }),
          machine({ id: 3, name: 'gamma', status: 'offline' }),
        ]),
      'POST /api/jobs/plan': () => json(plan),
    })
    renderWithProviders(<NewJobForm onCreated={() => {}} onCancel={() => {}} />)
    const user = userEvent.setup()
    await user.type(screen.getByLabelText('Name'), 'pinned')
    await user.click(distributedSwitch())
    await user.click(screen.getByRole('radio', { name: 'Manual' }))

    const beta = (await screen.findByText('beta')).closest('label')!
    const alpha = screen.getByText('alpha').closest('label')!
    expect(alpha).toHaveTextContent('1 of 4 GPUs free')
    expect(beta).toHaveTextContent('2 of 2 GPUs free')
    // Offline machines are not offered.
    expect(screen.queryByText('gamma')).not.toBeInTheDocument()
    await user.click(within(beta).getByRole('checkbox'))
    await user.click(within(alpha).getByRole('checkbox'))
    expect(within(beta).getByText('master')).toBeInTheDocument()
    await user.click(screen.getByRole('button', { name: 'Plan' }))

    await screen.findByRole('region', { name: 'Execution plan' })
    expect((requests.find((r) => r.path === '/api/jobs/plan')!.body as { placement: unknown }).placement).toEqual({
      policy: 'pack',
      machines: ['beta', 'alpha'],
    })
  })

  it('shows an unavailable machine with alternatives, and plans again on them', async () => {
    let refused = true
    const requests = mockFetch({
      ...csrfRoute(),
      ...recipesRoute,
      'GET /api/machines': () => json([machine({ id: 1, name: 'alpha' }), machine({ id: 3, name: 'gamma' })]),
      'POST /api/jobs/plan': () =>
        refused
          ? json(
              {
                resources: ['needs 2 online machines; 1 online machine(s) can hold a node (gamma not online)'],
                detail: 'needs 2 online machines; 1 online machine(s) can hold a node (gamma not online)',
                skipped: [
                  { machine_id: 3, machine_name: 'gamma', reason: 'offline' },
                  { machine_id: 2, machine_name: 'beta', reason: "not in the job's placement" },
                ],
              },
              400,
            )
          : json(plan),
      'GET /api/tasks/distributed/suggest_machines': () =>
        json({ suggested: [1, 2], enough: true, machines: [machine({ id: 1, name: 'alpha' }), machine({ id: 2, name: 'beta' })] }),
    })
    renderWithProviders(<NewJobForm onCreated={() => {}} onCancel={() => {}} />)
    const user = userEvent.setup()
    await user.type(screen.getByLabelText('Name'), 'run')
    await user.click(distributedSwitch())
    await user.click(screen.getByRole('radio', { name: 'Manual' }))
    await user.click(within((await screen.findByText('gamma')).closest('label')!).getByRole('checkbox'))
    await user.click(within(screen.getByText('alpha').closest('label')!).getByRole('checkbox'))
    await user.click(screen.getByRole('button', { name: 'Plan' }))

    const refusal = await screen.findByRole('region', { name: 'Plan refused' })
    expect(within(refusal).getByRole('heading', { name: 'Machine unavailable' })).toBeInTheDocument()
    expect(within(refusal).getByRole('list', { name: 'Skipped machines' })).toHaveTextContent('gamma: offline')
    // The planner's message is the refusal's, not repeated as a form error.
    expect(screen.getAllByText(/needs 2 online machines/)).toHaveLength(1)
    expect(screen.queryByRole('button', { name: 'Launch' })).not.toBeInTheDocument()

    refused = false
    await user.click(await within(refusal).findByRole('button', { name: 'Use these machines' }))
    await user.click(screen.getByRole('button', { name: 'Plan' }))
    expect(await screen.findByRole('button', { name: 'Launch' })).toBeInTheDocument()
    const plans = requests.filter((r) => r.path === '/api/jobs/plan')
    expect((plans[1].body as { placement: unknown }).placement).toEqual({ policy: 'pack', machines: ['alpha', 'beta'] })
  })

  it('shows the field errors of a 400 next to their fields', async () => {
    mockFetch({
      ...csrfRoute(),
      ...recipesRoute,
      'POST /api/jobs/plan': () =>
        json(
          {
            name: ['A job with this name is already running.'],
            resources: { nodes: ['Ensure this value is greater than or equal to 1.'], min_gpu_memory: ['A valid integer is required.'] },
            env: ['1BAD: not a valid variable name.'],
            fault_tolerance: { max_restarts: ['Ensure this value is less than or equal to 100.'] },
            hyperparameters: { lr: ['Must be a number.'] },
            non_field_errors: ['Something form-wide.'],
          },
          400,
        ),
    })
    renderWithProviders(<NewJobForm onCreated={() => {}} onCancel={() => {}} />)
    const user = userEvent.setup()
    await user.type(screen.getByLabelText('Name'), 'dup')
    await user.click(distributedSwitch())
    await user.click(screen.getByRole('button', { name: 'Plan' }))

    expect(await screen.findByText('A job with this name is already running.')).toBeInTheDocument()
    expect(fieldOf('Name')).toHaveTextContent('A job with this name is already running.')
    expect(fieldOf('Machines')).toHaveTextContent('Ensure this value is greater than or equal to 1.')
    expect(fieldOf('Min GPU memory (GB)')).toHaveTextContent('A valid integer is required.')
    expect(fieldOf('Max restarts')).toHaveTextContent('Ensure this value is less than or equal to 100.')
    expect(fieldOf('Steps')).toHaveTextContent(/^Steps$/)
    expect(screen.getByRole('group', { name: 'Environment' })).toHaveTextContent('1BAD: not a valid variable name.')
    expect(fieldOf('Learning rate')).toHaveTextContent('Must be a number.')
    expect(screen.getByText(/Something form-wide\./)).toBeInTheDocument()
  })
})
