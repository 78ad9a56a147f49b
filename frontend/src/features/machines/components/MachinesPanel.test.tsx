import { act, screen, waitFor, within } from '@testing-library/react'
import userEvent from '@testing-library/user-event'
import { describe, expect, it } from 'vitest'
import { applyClusterMessage } from '../../../app/cluster-stream'
import { machine } from '../../../test/fixtures'
import { csrfRoute, json, mockFetch } from '../../../test/http'
import { renderWithProviders } from '../../../test/render'
import type { Machine } from '../../../lib/types'
import { MachinesPanel } from './MachinesPanel'

const staff = { 'GET /api/auth/me': () => json({ username: 'ada', is_staff: true, projects: ['default'] }) }
const viewer = { 'GET /api/auth/me': () => json({ username: 'vic', is_staff: false, projects: [] }) }

function gpuMachine(overrides: Partial<Machine> = {}): Machine {
  return machine({
    id: 2,
    name: 'beta',
    host: '10.0.0.12',
    capabilities: {
      cpu_count: 32,
      memory: 128 * 1024 ** 3,
      gpu_count: 2,
      gpu_memory: 2 * 81920,
      gpus: [
        { index: 0, name: 'A100', memory_mb: 81920 },
        { index: 1, name: 'A100', memory_mb: 81920 },
      ],
    },
    current_load: { cpu_usage: 55, memory_usage: 71, gpu_usage: [93, 4] },
    labels: { rack: '3', zone: 'b' },
    ...overrides,
  })
}

const row = (name: string) => screen.getByRole('row', { name })

describe('machines', () => {
  it('shows a quarantined machine with why, the job that found it and its failed health check, and releases it', async () => {
    const reason = 'rank 1 on machine beta (process stopped, SIGSTOP?) held job #4 (attempt 0) at step 40'
    let beta = gpuMachine({
      status: 'quarantined', quarantined_at: '2030-01-01T00:00:00Z', quarantine_reason: reason, quarantine_job: 4,
      probation_until: '2030-01-01T00:10:00Z',
      health: { at: '2030-01-01T00:10:05Z', ok: false, checks: [{ name: 'gpu', ok: false, detail: 'CUDA is not available', seconds: 0.4 }] },
    })
    const requests = mockFetch({ ...csrfRoute(), ...staff, 'GET /api/machines': () => json([machine(), beta]),
      'PATCH /api/machines/2': () => {
        beta = gpuMachine({ status: 'online' })
        return json(beta)
      } })
    renderWithProviders(<MachinesPanel />)
    await screen.findByRole('row', { name: 'beta' })
    // One line under the machine, the width of the table: only beta is quarantined.
    const [shown] = screen.getAllByLabelText('Quarantine')
    expect(screen.getAllByLabelText('Quarantine')).toHaveLength(1)
    expect(shown).toHaveTextContent(`Quarantined: ${reason}`)
    expect(within(shown).getByRole('link', { name: 'job #4' })).toHaveAttribute('href', '/jobs/4')
    expect(shown).toHaveTextContent('last health check failed: gpu: CUDA is not available')
    expect(within(row('beta')).getByText('quarantined')).toHaveClass('badge-quarantined')
    expect(within(row('alpha')).queryByRole('button', { name: 'Release alpha' })).not.toBeInTheDocument()
    await userEvent.setup().click(within(row('beta')).getByRole('button', { name: 'Release beta' }))
    await waitFor(() => expect(screen.queryByLabelText('Quarantine')).not.toBeInTheDocument())
    expect(requests.filter((r) => r.method === 'PATCH').map((r) => r.body)).toEqual([{ quarantined: false }])
  })

  it('says when an agent declares its GPUs and warns where NVML sees otherwise', async () => {
    const declared = gpuMachine({
      capabilities: {
        ...gpuMachine().capabilities,
        gpus: [
          { index: 0, name: 'RTX3090', memory_mb: 24576 },
          { index: 1, name: 'RTX3090', memory_mb: 24576 },
        ],
        gpus_declared: true,
        gpus_detected: [
          { index: 0, name: 'NVIDIA A100-SXM4-80GB', memory_mb: 81920 },
          { index: 1, name: 'NVIDIA A100-SXM4-80GB', memory_mb: 81920 },
        ],
        gpu_warnings: ['GPU 0: declared RTX3090, NVML sees NVIDIA A100-SXM4-80GB', 'GPU 0: declared 24576 MB, NVML sees 81920 MB'],
      },
    })
    mockFetch({ ...csrfRoute(), ...staff, 'GET /api/machines': () => json([machine(), declared]) })
    renderWithProviders(<MachinesPanel />)
    const beta = await screen.findByRole('row', { name: 'beta' })
    expect(within(beta).getByText('GPUs declared by its agent (2 seen by NVML)')).toBeInTheDocument()
    expect(within(within(beta).getByRole('list', { name: 'GPU warnings' })).getAllByRole('listitem').map((li) => li.textContent)).toEqual([
      'GPU 0: declared RTX3090, NVML sees NVIDIA A100-SXM4-80GB',
      'GPU 0: declared 24576 MB, NVML sees 81920 MB',
    ])
    expect(within(row('alpha')).queryByRole('list', { name: 'GPU warnings' })).not.toBeInTheDocument()
    expect(within(row('alpha')).queryByText(/declared by its agent/)).not.toBeInTheDocument()
  })

  it('shows each interface with its link speed and what the latest job preflight measured on it', async () => {
    const measured = gpuMachine({
      capabilities: {
        ...gpuMachine().capabilities,
        interfaces: [
          { interface: 'eth0', address: '10.0.0.12', network: '10.0.0.0/24', speed_mbit: 1000 },
          { interface: 'ib0', address: '10.9.0.12', network: '10.9.0.0/24', speed_mbit: 100000 },
        ],
      },
      measured_links: { ib0: { mb_per_s: 11800, latency_ms: 0.021, pairs: 3, job: 12, measured_at: 1_764_000_000 } },
    })
    mockFetch({ ...csrfRoute(), ...staff, 'GET /api/machines': () => json([machine(), measured]) })
    renderWithProviders(<MachinesPanel />)
    const beta = await screen.findByRole('row', { name: 'beta' })
    const lines = within(within(beta).getByRole('list', { name: 'Interfaces' })).getAllByRole('listitem')
    expect(lines.map((li) => li.textContent)).toEqual([
      'eth0 10.0.0.12 · 1 Gb/s link',
      'ib0 10.9.0.12 · 100 Gb/s link · measured 11,800 MB/s, 0.02 ms (job #12)',
    ])
    expect(lines[0]).toHaveClass('muted')
    expect(lines[1]).not.toHaveClass('muted')
    expect(within(row('alpha')).queryByRole('list', { name: 'Interfaces' })).not.toBeInTheDocument()
  })

  it('shows each machine: status, capabilities, CPU / memory / per-GPU bars, heartbeat and labels; the stream keeps them live', async () => {
    mockFetch({ ...csrfRoute(), ...staff, 'GET /api/machines': () => json([machine(), gpuMachine()]) })
    const { client } = renderWithProviders(<MachinesPanel />)

    const alpha = await screen.findByRole('row', { name: 'alpha' })
    expect(within(alpha).getByText('online')).toHaveClass('badge-online')
    expect(within(alpha).getByText('10.0.0.11:8001')).toBeInTheDocument()
    expect(within(alpha).getByText('16 CPUs · 64.0 GiB')).toBeInTheDocument()
    expect(within(alpha).getByText('no GPUs')).toBeInTheDocument()
    expect(within(alpha).getByText('just now')).toBeInTheDocument()

    const beta = row('beta')
    expect(within(beta).getByText('2 × A100 · 80 GiB each')).toBeInTheDocument()
    expect(within(beta).getByTitle('CPU 55%')).toBeInTheDocument()
    expect(within(beta).getByTitle('Memory 71%')).toBeInTheDocument()
    expect(within(beta).getByTitle('GPU 0 (A100) 93%')).toBeInTheDocument()
    expect(within(beta).getByTitle('GPU 1 (A100) 4%')).toBeInTheDocument()
    expect(within(within(beta).getByRole('list', { name: 'Labels' })).getAllByRole('listitem').map((li) => li.textContent)).toEqual([
      'rack=3',
      'zone=b',
    ])

    // A cluster-stream snapshot replaces the numbers in place.
    act(() =>
      applyClusterMessage(client, {
        type: 'machines',
        machines: [machine(), gpuMachine({ current_load: { cpu_usage: 12, memory_usage: 71, gpu_usage: [50, 60] } })],
      }),
    )
    expect(await within(row('beta')).findByTitle('CPU 12%')).toBeInTheDocument()
    expect(within(row('beta')).getByTitle('GPU 1 (A100) 60%')).toBeInTheDocument()
  })

  it("shows which projects take each machine's GPUs and processes", async () => {
    mockFetch({
      ...csrfRoute(),
      ...staff,
      'GET /api/machines': () =>
        json([machine({ usage: [{ project: 'nlp', gpus: 0, processes: 1 }, { project: 'vision', gpus: 2, processes: 4 }] }), gpuMachine()]),
    })
    renderWithProviders(<MachinesPanel />)
    expect(within(await screen.findByRole('row', { name: 'alpha' })).getByText('nlp: 1 process; vision: 2 GPUs, 4 processes')).toBeInTheDocument()
    expect(within(row('beta')).getByText('—', { selector: 'td' })).toBeInTheDocument()
  })

  it('pings a machine and shows the round trip, or that its agent did not answer', async () => {
    const pingOut = (id: number, rtt: number | null) => ({
      machine_id: id,
      name: id === 1 ? 'alpha' : 'beta',
      reachable: rtt != null,
      rtt_ms: rtt,
      timeout_s: 5,
      detail: rtt != null ? `answered in ${rtt} ms` : 'no answer from its agent within 5 s',
      status: 'online',
      last_heartbeat: null,
    })
    const requests = mockFetch({
      ...csrfRoute(),
      ...staff,
      'GET /api/machines': () => json([machine(), gpuMachine()]),
      'POST /api/network/machines/1/ping': () => json(pingOut(1, 2.137)),
      'POST /api/network/machines/2/ping': () => json(pingOut(2, null)),
    })
    renderWithProviders(<MachinesPanel />)
    const user = userEvent.setup()
    await user.click(await screen.findByRole('button', { name: 'Ping alpha' }))
    expect(await within(row('alpha')).findByText('2.1 ms')).toHaveClass('rtt-ok')
    expect(within(row('beta')).getByLabelText('Round trip')).toHaveTextContent('—')

    await user.click(screen.getByRole('button', { name: 'Ping beta' }))
    const timeout = await within(row('beta')).findByText('no answer')
    expect(timeout).toHaveAttribute('title', 'no answer from its agent within 5 s')
    expect(requests.filter((r) => r.method === 'POST' && r.path.endsWith('/ping')).map((r) => r.path)).toEqual([
      '/api/network/machines/1/ping',
      '/api/network/machines/2/ping',
    ])
  })

  it('drains a machine and undrains it', async () => {
    let alpha = machine()
    const requests = mockFetch({
      ...csrfRoute(),
      ...staff,
      'GET /api/machines': () => json([alpha]),
      'PATCH /api/machines/1': (request) => {
        const status = (request.body as { status: 'draining' | 'online' }).status
        alpha = machine({ status, drained: status === 'draining' })
        return json(alpha)
      },
    })
    renderWithProviders(<MachinesPanel />)
    const user = userEvent.setup()
    await user.click(await screen.findByRole('button', { name: 'Drain alpha' }))
    expect(await within(row('alpha')).findByText('draining')).toHaveClass('badge-draining')

    await user.click(screen.getByRole('button', { name: 'Undrain alpha' }))
    expect(await within(row('alpha')).findByText('online')).toHaveClass('badge-online')
    expect(screen.getByRole('button', { name: 'Drain alpha' })).toBeInTheDocument()
    expect(requests.filter((r) => r.method === 'PATCH').map((r) => r.body)).toEqual([{ status: 'draining' }, { status: 'online' }])
  })

  it("shows each machine's volumes, how full and whether they exist, and staff declare them", async () => {
    let alpha = machine({
      volumes: [
        { name: 'gone', path: '/mnt/gone', source: 'agent', exists: false, total_bytes: null, free_bytes: null, storage_class: null },
        { name: 'shared-data', path: '/mnt/nfs', source: 'agent', exists: true, total_bytes: 100 * 1024 ** 3, free_bytes: 60 * 1024 ** 3, storage_class: null },
      ],
    })
    const requests = mockFetch({
      ...csrfRoute(),
      ...staff,
      'GET /api/machines': () => json([alpha]),
      'PATCH /api/machines/1': (request) => {
        const declared = (request.body as { volumes: Record<string, string> }).volumes
        alpha = machine({
          declared_volumes: declared,
          volumes: Object.entries(declared).map(([name, path]) => ({
            name,
            path,
            source: 'server' as const,
            exists: null,
            total_bytes: null,
            free_bytes: null,
            storage_class: null,
          })),
        })
        return json(alpha)
      },
    })
    renderWithProviders(<MachinesPanel />)
    const volumes = within(await screen.findByRole('row', { name: 'alpha' })).getByRole('list', { name: 'Volumes' })
    expect(within(volumes).getAllByRole('listitem').map((li) => li.textContent)).toEqual([
      'gone /mnt/gone · missing',
      'shared-data /mnt/nfs · 40% full of 100 GiB',
    ])

    const user = userEvent.setup()
    await user.click(screen.getByRole('button', { name: 'Volumes of alpha' }))
    const editor = screen.getByRole('group', { name: 'Volumes of alpha' })
    await user.type(within(editor).getByRole('textbox'), 'scratch=/scratch')
    await user.click(within(editor).getByRole('button', { name: 'Save volumes' }))
    expect(await within(row('alpha')).findByText('scratch /scratch · not checked')).toBeInTheDocument()
    expect(requests.filter((r) => r.method === 'PATCH').map((r) => r.body)).toEqual([{ volumes: { scratch: '/scratch' } }])
  })

  it('removes a machine only after asking, and Cancel (or Escape) keeps it', async () => {
    const requests = mockFetch({
      ...csrfRoute(),
      ...staff,
      'GET /api/machines': () => json([machine(), gpuMachine()]),
      'DELETE /api/machines/2': () => new Response(null, { status: 204 }),
    })
    renderWithProviders(<MachinesPanel />)
    const user = userEvent.setup()
    await user.click(await screen.findByRole('button', { name: 'Remove beta' }))
    const confirm = screen.getByRole('group', { name: 'Remove beta?' })
    // Focus goes to Cancel: Enter right away keeps the machine.
    expect(within(confirm).getByRole('button', { name: 'Cancel' })).toHaveFocus()
    await user.keyboard('{Enter}')
    expect(screen.queryByRole('group', { name: 'Remove beta?' })).not.toBeInTheDocument()
    expect(screen.getByRole('button', { name: 'Remove beta' })).toHaveFocus()

    await user.keyboard('{Enter}')
    await user.keyboard('{Escape}')
    expect(screen.queryByRole('group', { name: 'Remove beta?' })).not.toBeInTheDocument()
    expect(requests.some((r) => r.method === 'DELETE')).toBe(false)

    await user.click(screen.getByRole('button', { name: 'Remove beta' }))
    await user.click(within(screen.getByRole('group', { name: 'Remove beta?' })).getByRole('button', { name: 'Remove beta' }))
    await waitForRowGone('beta')
    expect(row('alpha')).toBeInTheDocument()
    expect(requests.filter((r) => r.method === 'DELETE').map((r) => r.path)).toEqual(['/api/machines/2'])
  })

  it('offers to stop the nodes when the machine still runs some (409)', async () => {
    const requests = mockFetch({
      ...csrfRoute(),
      ...staff,
      'GET /api/machines': () => json([machine()]),
      'DELETE /api/machines/1': (request) =>
        request.url.searchParams.get('force') === 'true'
          ? new Response(null, { status: 204 })
          : json({ detail: 'alpha runs nodes of live jobs: #7.', live_nodes: [] }, 409),
    })
    renderWithProviders(<MachinesPanel />)
    const user = userEvent.setup()
    await user.click(await screen.findByRole('button', { name: 'Remove alpha' }))
    const confirm = screen.getByRole('group', { name: 'Remove alpha?' })
    await user.click(within(confirm).getByRole('button', { name: 'Remove alpha' }))
    expect(await within(confirm).findByRole('alert')).toHaveTextContent('alpha runs nodes of live jobs: #7.')
    await user.click(within(confirm).getByRole('button', { name: 'Stop its nodes and remove' }))
    await waitForRowGone('alpha')
    expect(requests.filter((r) => r.method === 'DELETE').map((r) => r.url.search)).toEqual(['', '?force=true'])
  })

  it("health check all shows each machine's result and how many answered", async () => {
    mockFetch({
      ...csrfRoute(),
      ...staff,
      'GET /api/machines': () => json([machine(), gpuMachine()]),
      'POST /api/network/health-check': () =>
        json({
          results: [
            { machine_id: 1, name: 'alpha', reachable: true, rtt_ms: 14.6, status: 'online' },
            { machine_id: 2, name: 'beta', reachable: false, rtt_ms: null, status: 'online' },
          ],
          healthy: 1,
          total: 2,
        }),
    })
    renderWithProviders(<MachinesPanel />)
    const user = userEvent.setup()
    await user.click(await screen.findByRole('button', { name: 'Health check all' }))
    expect(await screen.findByText('1 of 2 answered')).toBeInTheDocument()
    expect(within(row('alpha')).getByLabelText('Round trip')).toHaveTextContent('15 ms')
    expect(within(row('beta')).getByLabelText('Round trip')).toHaveTextContent('no answer')
  })

  it('a viewer sees the machines, may ping them, and gets no add, drain or remove', async () => {
    const requests = mockFetch({ ...csrfRoute(), ...viewer, 'GET /api/machines': () => json([machine({ drained: true, status: 'draining' })]) })
    renderWithProviders(<MachinesPanel />)
    const alpha = await screen.findByRole('row', { name: 'alpha' })
    expect(within(alpha).getByRole('button', { name: 'Ping alpha' })).toBeInTheDocument()
    expect(screen.getByRole('button', { name: 'Health check all' })).toBeInTheDocument()
    // Staff-ness comes from /api/auth/me: its answer is in before what is absent is checked.
    await waitFor(() => expect(requests.some((r) => r.path === '/api/auth/me')).toBe(true))
    await act(() => new Promise((resolve) => setTimeout(resolve, 10)))
    expect(screen.queryByRole('button', { name: /^(Drain|Undrain|Remove) alpha$/ })).not.toBeInTheDocument()
    expect(screen.queryByRole('button', { name: 'Add machine' })).not.toBeInTheDocument()
  })

  it('validates the add form as the user types, then shows the join command once with a copy button', async () => {
    const registered = [machine()]
    const gamma = machine({ id: 3, name: 'gamma', host: 'gpu-3.lab', status: 'pending', capabilities: {}, current_load: {}, last_heartbeat: null, labels: { rack: '3' } })
    const requests = mockFetch({
      ...csrfRoute(),
      ...staff,
      'GET /api/machines': () => json(registered),
      'POST /api/machines': () => {
        registered.push(gamma)
        return json({ ...gamma, token: 'tok-secret', agent_command: 'torchyard agent --server http://x --token tok-secret' }, 201)
      },
    })
    renderWithProviders(<MachinesPanel />)
    const user = userEvent.setup()
    await user.click(await screen.findByRole('button', { name: 'Add machine' }))
    const form = screen.getByRole('form', { name: 'Add machine' })
    const name = within(form).getByLabelText('Name')
    const host = within(form).getByLabelText('Host')

    // Nothing is wrong before anything was typed.
    expect(within(form).queryByRole('alert')).not.toBeInTheDocument()
    await user.type(name, 'alpha')
    expect(within(form).getByRole('alert')).toHaveTextContent("a machine named 'alpha' already exists.")
    expect(name).toHaveAttribute('aria-invalid', 'true')
    await user.clear(name)
    await user.type(name, '-gam ma')
    expect(within(form).getByRole('alert')).toHaveTextContent("letters, digits, '.', '_' and '-' only")
    await user.clear(name)
    await user.type(name, 'gamma')
    expect(within(form).queryByRole('alert')).not.toBeInTheDocument()
    expect(name).not.toHaveAttribute('aria-invalid')

    await user.type(host, 'gpu 3')
    expect(within(form).getByRole('alert')).toHaveTextContent('a hostname or an IP address')
    await user.clear(host)
    expect(within(form).getByRole('alert')).toHaveTextContent('required')
    await user.type(host, 'gpu-3.lab')
    await user.type(within(form).getByLabelText('Labels'), 'rack')
    expect(within(form).getByRole('alert')).toHaveTextContent('"rack" is not key=value.')
    await user.type(within(form).getByLabelText('Labels'), '=3')
    expect(within(form).queryByRole('alert')).not.toBeInTheDocument()

    await user.click(within(form).getByRole('button', { name: 'Add' }))
    // The server's join command as it sent it (it knows the URL agents reach it by).
    const command = 'torchyard agent --server http://x --token tok-secret'
    expect(await screen.findByText(command)).toBeInTheDocument()
    expect(requests.find((r) => r.method === 'POST')!.body).toEqual({ name: 'gamma', host: 'gpu-3.lab', labels: { rack: '3' } })
    await user.click(screen.getByRole('button', { name: 'Copy' }))
    expect(await navigator.clipboard.readText()).toBe(command) // user-event's clipboard
    expect(await screen.findByRole('button', { name: 'Copied' })).toBeInTheDocument()
    // The new (pending, not yet reporting) machine is in the table too.
    expect(within(row('gamma')).getByText('pending')).toBeInTheDocument()
    expect(within(row('gamma')).getByText('not reported yet')).toBeInTheDocument()

    await user.click(screen.getByRole('button', { name: 'Done' }))
    expect(screen.queryByText(/tok-secret/)).not.toBeInTheDocument()
  })

  it('sends nothing while the form is wrong: Add shows every problem at once', async () => {
    const requests = mockFetch({ ...csrfRoute(), ...staff, 'GET /api/machines': () => json([machine()]) })
    renderWithProviders(<MachinesPanel />)
    const user = userEvent.setup()
    await user.click(await screen.findByRole('button', { name: 'Add machine' }))
    const form = screen.getByRole('form', { name: 'Add machine' })
    await user.click(within(form).getByRole('button', { name: 'Add' }))
    expect(within(form).getAllByRole('alert').map((a) => a.textContent)).toEqual([
      'required.',
      'required: the address the other machines reach it at.',
    ])
    expect(requests.some((r) => r.method === 'POST')).toBe(false)
  })
})

const waitForRowGone = (name: string) => waitFor(() => expect(screen.queryByRole('row', { name })).not.toBeInTheDocument())
