import { screen, within } from '@testing-library/react'
import userEvent from '@testing-library/user-event'
import { describe, expect, it, vi } from 'vitest'
import type { ExecutionPlan, PlanRefusal } from '../../../lib/types'
import { machine } from '../../../test/fixtures'
import { json, mockFetch } from '../../../test/http'
import { renderWithProviders } from '../../../test/render'
import { refusalKind } from '../plan-refusal'
import { PlanRefusalView, PlanView } from './PlanView'

const plan: ExecutionPlan = {
  world_size: 4,
  nnodes: 2,
  procs_per_node: 2,
  master_addr: '10.0.0.12',
  master_port: 29517,
  backend: 'nccl',
  nodes: [
    { node_rank: 0, machine_id: 2, machine_name: 'beta', host: '10.0.0.12', nproc: 2, rank_start: 0, rank_end: 1, gpus: [0, 1] },
    { node_rank: 1, machine_id: 1, machine_name: 'alpha', host: '10.0.0.11', nproc: 2, rank_start: 2, rank_end: 3, gpus: [2, 3] },
  ],
  hyperparameters: { batch_size: 16, lr: 0.001, world_size: 4, rank: 0, global_batch_size: 64 },
  warnings: ['alpha has 1 CPUs for 2 processes'],
  skipped: [
    { machine_id: 3, machine_name: 'gamma', reason: 'offline' },
    { machine_id: 4, machine_name: 'delta', reason: '1 GPUs free, 2 asked' },
  ],
  preflight: { master: '10.0.0.12:29517', versions: { beta: 'torch 2.5.1 on Python 3.12.3', alpha: 'torch 2.5.1 on Python 3.12.1' } },
}

const rowOf = (table: string, text: string) =>
  within(screen.getByRole('table', { name: table })).getByText(text).closest('tr') as HTMLElement

describe('plan view', () => {
  it('shows which machine gets which ranks, the master, the adjustments, the skipped machines and preflight', async () => {
    const onLaunch = vi.fn()
    renderWithProviders(
      <PlanView plan={plan} asked={{ batch_size: 64, lr: 0.001 }} stale={false} launching={false} onLaunch={onLaunch} />,
    )
    expect(screen.getByText(/4 processes on 2 machines \(2 per machine\)/)).toBeInTheDocument()
    expect(screen.getByText('nccl')).toBeInTheDocument()
    expect(screen.getByText('10.0.0.12:29517', { selector: 'strong' })).toBeInTheDocument()

    const beta = rowOf('Nodes', 'beta')
    expect(beta).toHaveTextContent('ranks 0–1')
    expect(beta).toHaveTextContent('0, 1')
    expect(within(beta).getByText('master')).toBeInTheDocument()
    const alpha = rowOf('Nodes', 'alpha')
    expect(alpha).toHaveTextContent('ranks 2–3')
    expect(within(alpha).queryByText('master')).not.toBeInTheDocument()

    // The global batch of 64 split over 4 ranks; rank and world size are not hyperparameters to show.
    expect(rowOf('Hyperparameters', 'batch_size')).toHaveTextContent('batch_size6416')
    expect(rowOf('Hyperparameters', 'global_batch_size')).toHaveTextContent('global_batch_size—64')
    expect(within(screen.getByRole('table', { name: 'Hyperparameters' })).queryByText('rank')).not.toBeInTheDocument()

    const skipped = screen.getByRole('list', { name: 'Skipped machines' })
    expect(skipped).toHaveTextContent('gamma: offline')
    expect(skipped).toHaveTextContent('delta: 1 GPUs free, 2 asked')
    expect(screen.getByRole('list', { name: 'Preflight versions' })).toHaveTextContent('beta: torch 2.5.1 on Python 3.12.3')
    expect(screen.getByRole('list', { name: 'Warnings' })).toHaveTextContent('alpha has 1 CPUs for 2 processes')

    await userEvent.setup().click(screen.getByRole('button', { name: 'Launch' }))
    expect(onLaunch).toHaveBeenCalledTimes(1)
  })

  it('offers no Launch for a plan the form has moved away from', () => {
    renderWithProviders(<PlanView plan={plan} asked={{}} stale launching={false} onLaunch={() => {}} />)
    expect(screen.queryByRole('button', { name: 'Launch' })).not.toBeInTheDocument()
    expect(screen.getByText(/plan again before launching/)).toBeInTheDocument()
  })

  it("lists a job's hot spares beside its nodes", () => {
    const spared = { ...plan, spares: [{ machine_id: 5, machine_name: 'epsilon', host: '10.0.0.15', gpus: [0, 1] }] }
    renderWithProviders(<PlanView plan={spared} asked={{}} stale={false} launching={false} onLaunch={vi.fn()} />)
    const row = rowOf('Nodes', 'epsilon')
    expect(within(row).getByText('hot spare')).toBeInTheDocument()
    expect(within(row).getByText("takes a lost node's ranks")).toBeInTheDocument()
    expect(within(row).getByText('0, 1')).toBeInTheDocument()
  })

  it('shows the range of an elastic job and the machines it starts with', () => {
    renderWithProviders(
      <PlanView plan={{ ...plan, nodes_range: [1, 3] }} asked={{}} stale={false} launching={false} onLaunch={() => {}} />,
    )
    expect(screen.getByText(/elastic: 1 to 3 machines \(starts with 2\)/)).toBeInTheDocument()
  })

  it("says where a Ray plan's head and GCS are, and that each node's other Ray ports are picked at launch", () => {
    renderWithProviders(<PlanView plan={{ ...plan, launcher: 'ray' }} asked={{}} stale={false} launching={false} onLaunch={() => {}} />)
    const ray = screen.getByText(/node 0 runs the Ray head/)
    expect(ray).toHaveTextContent('Ray: node 0 runs the Ray head, its GCS on 10.0.0.12:29517, and every other node joins it.')
    expect(ray).toHaveTextContent(
      "Each node's other Ray ports (dashboard, raylet, object manager, worker range) are chosen free on its machine at launch and shown on its node card.",
    )
    expect(within(rowOf('Nodes', 'beta')).getByText('Ray head')).toBeInTheDocument()
    expect(within(rowOf('Nodes', 'alpha')).queryByText('Ray head')).not.toBeInTheDocument()
  })

  it('says nothing of Ray for another launcher', () => {
    renderWithProviders(<PlanView plan={{ ...plan, launcher: 'torchrun' }} asked={{}} stale={false} launching={false} onLaunch={() => {}} />)
    expect(screen.queryByText(/Ray head/)).not.toBeInTheDocument()
    expect(within(rowOf('Nodes', 'beta')).getByText('master')).toBeInTheDocument()
  })
})

const refusal = (detail: string, skipped: PlanRefusal['skipped'] = []): PlanRefusal => ({
  detail,
  resources: [detail],
  skipped,
})

describe('plan refusal', () => {
  it('tells an unavailable machine from missing resources and a busy cluster', () => {
    const offline = refusal('needs 2 online machines; 1 online machine(s) can hold a node (gamma not online)', [
      { machine_id: 3, machine_name: 'gamma', reason: 'offline' },
    ])
    expect(refusalKind(offline, ['gamma', 'alpha'])).toBe('unavailable')
    expect(refusalKind(offline, [])).toBe('insufficient')
    expect(refusalKind(refusal('unknown machines in placement: zeta'), ['zeta'])).toBe('unavailable')
    expect(refusalKind(refusal('waiting for 2 machines with free GPUs: 1 now'), [])).toBe('busy')
  })

  it('offers the machines that fit instead of an unavailable one', async () => {
    const requests = mockFetch({
      'GET /api/tasks/distributed/suggest_machines': () =>
        json({
          suggested: [1, 2],
          enough: true,
          machines: [
            machine({ id: 1, name: 'alpha', capabilities: { gpu_count: 4 } }),
            machine({ id: 2, name: 'beta', capabilities: { gpu_count: 2 }, usage: [{ project: 'x', gpus: 1, processes: 1 }] }),
          ],
        }),
    })
    const onUseMachines = vi.fn()
    renderWithProviders(
      <PlanRefusalView
        refusal={refusal('needs 2 online machines; 1 online machine(s) can hold a node (gamma not online)', [
          { machine_id: 3, machine_name: 'gamma', reason: 'offline' },
        ])}
        picked={['gamma', 'alpha']}
        nodes={2}
        gpusPerNode={1}
        onUseMachines={onUseMachines}
        onLowerNodes={() => {}}
        onLaunchAnyway={() => {}}
        launching={false}
      />,
    )
    expect(screen.getByRole('heading', { name: 'Machine unavailable' })).toBeInTheDocument()
    expect(screen.getByRole('list', { name: 'Skipped machines' })).toHaveTextContent('gamma: offline')
    expect(await screen.findByText(/alpha \(4 free GPUs\), beta \(1 free GPU\)/)).toBeInTheDocument()
    expect(requests[0].url.search).toBe('?num_machines=2&gpus_per_machine=1')
    await userEvent.setup().click(screen.getByRole('button', { name: 'Use these machines' }))
    expect(onUseMachines).toHaveBeenCalledWith(['alpha', 'beta'])
  })

  it('says what is missing and offers as many machines as fit', async () => {
    mockFetch({
      'GET /api/tasks/distributed/suggest_machines': () =>
        json({ suggested: [1], enough: false, machines: [machine({ id: 1, name: 'alpha', capabilities: { gpu_count: 2 } })] }),
    })
    const onLowerNodes = vi.fn()
    renderWithProviders(
      <PlanRefusalView
        refusal={refusal('needs 3 online machines with 2 GPUs of >= 0 MB; 1 online machine(s) can hold a node', [
          { machine_id: 2, machine_name: 'beta', reason: '1 GPUs free, 2 asked' },
        ])}
        picked={[]}
        nodes={3}
        gpusPerNode={2}
        onUseMachines={() => {}}
        onLowerNodes={onLowerNodes}
        onLaunchAnyway={() => {}}
        launching={false}
      />,
    )
    expect(screen.getByRole('heading', { name: 'Not enough resources' })).toBeInTheDocument()
    expect(screen.getByText(/needs 3 online machines with 2 GPUs/)).toBeInTheDocument()
    expect(await screen.findByText(/Only 1 machine with 2 free GPUs is online \(alpha\); 3 asked/)).toBeInTheDocument()
    await userEvent.setup().click(screen.getByRole('button', { name: 'Use 1 machine' }))
    expect(onLowerNodes).toHaveBeenCalledWith(1)
  })

  it('lets a job wait in the queue when the machines are only busy', async () => {
    mockFetch({})
    const onLaunchAnyway = vi.fn()
    renderWithProviders(
      <PlanRefusalView
        refusal={refusal('waiting for 2 machines with free GPUs: 1 now (alpha: 0 GPUs free, 2 asked)')}
        picked={[]}
        nodes={2}
        gpusPerNode={2}
        onUseMachines={() => {}}
        onLowerNodes={() => {}}
        onLaunchAnyway={onLaunchAnyway}
        launching={false}
      />,
    )
    expect(screen.getByRole('heading', { name: 'Machines busy' })).toBeInTheDocument()
    await userEvent.setup().click(screen.getByRole('button', { name: 'Launch anyway (queue)' }))
    expect(onLaunchAnyway).toHaveBeenCalledTimes(1)
  })
})
