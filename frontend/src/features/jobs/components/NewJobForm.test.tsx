import { screen } from '@testing-library/react'
import userEvent from '@testing-library/user-event'
import { describe, expect, it, vi } from 'vitest'
import { jobDetail } from '../../../test/fixtures'
import { csrfRoute, json, mockFetch } from '../../../test/http'
import { renderWithProviders } from '../../../test/render'
import { NewJobForm } from './NewJobForm'

const recipesRoute = {
  'GET /api/recipes': () =>
    json([
      { entrypoint: 'examples/char_gpt.py', summary: 'A character-level transformer.' },
      { entrypoint: 'examples/mlp_ddp.py', summary: 'An MLP with DDP.' },
    ]),
}

function fieldOf(label: string): HTMLElement {
  return screen.getByLabelText(label).closest('.field') as HTMLElement
}

describe('new job form', () => {
  it('posts a JobSpec built from the form', async () => {
    const requests = mockFetch({
      ...csrfRoute(),
      ...recipesRoute,
      'POST /api/jobs': () => json(jobDetail({ id: 9 }), 201),
    })
    const onCreated = vi.fn()
    renderWithProviders(<NewJobForm onCreated={onCreated} onCancel={() => {}} />)
    const user = userEvent.setup()

    await user.type(screen.getByLabelText('Name'), 'gpt-run')
    // The server's recipes fill the list, each with its summary as the hint.
    expect(await screen.findByRole('option', { name: 'examples/char_gpt.py' })).toHaveAttribute(
      'title',
      'A character-level transformer.',
    )
    expect(screen.getByLabelText('Entrypoint')).toHaveValue('examples/mlp_ddp.py')
    expect(screen.getByText('An MLP with DDP.')).toBeInTheDocument()
    await user.selectOptions(screen.getByLabelText('Entrypoint'), 'examples/char_gpt.py')
    // The chosen recipe's summary is spelled out under the form.
    expect(screen.getByText('A character-level transformer.')).toBeInTheDocument()
    expect(screen.queryByText('An MLP with DDP.')).not.toBeInTheDocument()
    await user.clear(screen.getByLabelText('Steps'))
    await user.type(screen.getByLabelText('Steps'), '1200')
    await user.clear(screen.getByLabelText('Procs/node'))
    await user.type(screen.getByLabelText('Procs/node'), '2')
    await user.click(screen.getByRole('button', { name: 'Submit' }))

    await vi.waitFor(() => expect(onCreated).toHaveBeenCalled())
    expect(onCreated.mock.calls[0][0].id).toBe(9)
    expect(requests.find((r) => r.method === 'POST')!.body).toEqual({
      name: 'gpt-run',
      entrypoint: 'examples/char_gpt.py',
      args: ['--steps', '1200'],
      resources: { nodes: 2, procs_per_node: 2 },
      fault_tolerance: { max_restarts: 3 },
    })
  })

  it('shows the field errors of a 400 next to their fields', async () => {
    mockFetch({
      ...csrfRoute(),
      ...recipesRoute,
      'POST /api/jobs': () =>
        json(
          {
            name: ['A job with this name is already running.'],
            resources: { nodes: ['Only 1 machine is online; 2 nodes asked.'] },
            fault_tolerance: { max_restarts: ['Ensure this value is less than or equal to 100.'] },
            hyperparameters: { lr: ['Must be a number.'] },
            non_field_errors: ['No machine has enough GPUs.'],
          },
          400,
        ),
    })
    renderWithProviders(<NewJobForm onCreated={() => {}} onCancel={() => {}} />)
    const user = userEvent.setup()
    await user.type(screen.getByLabelText('Name'), 'dup')
    await user.click(screen.getByRole('button', { name: 'Submit' }))

    expect(await screen.findByText('A job with this name is already running.')).toBeInTheDocument()
    expect(fieldOf('Name')).toHaveTextContent('A job with this name is already running.')
    expect(fieldOf('Nodes')).toHaveTextContent('Only 1 machine is online; 2 nodes asked.')
    expect(fieldOf('Max restarts')).toHaveTextContent('Ensure this value is less than or equal to 100.')
    expect(fieldOf('Steps')).toHaveTextContent(/^Steps$/)
    // Errors for fields the form does not have, and form-wide ones, are listed with their path.
    expect(screen.getByText(/hyperparameters\.lr: Must be a number\./)).toBeInTheDocument()
    expect(screen.getByText(/No machine has enough GPUs\./)).toBeInTheDocument()
  })
})
