import { screen, within } from '@testing-library/react'
import userEvent from '@testing-library/user-event'
import { Route, Routes, useLocation } from 'react-router-dom'
import { describe, expect, it } from 'vitest'
import { comparison, run } from '../../../test/experiment-fixtures'
import { csrfRoute, json, mockFetch } from '../../../test/http'
import { renderWithProviders } from '../../../test/render'
import { ExperimentsPage } from './ExperimentsPage'

const runs = [
  run({
    run_id: '9.0',
    job: 9,
    name: 'lr-0.01',
    hyperparameters: { lr: 0.01, batch_size: 64 },
    final_metrics: [{ name: 'loss', goal: 'min', last: 0.525, last_step: 80, best: 0.5 }],
  }),
  run({
    run_id: '7.1',
    attempt: 1,
    final_metrics: [
      { name: 'acc', goal: 'max', last: 0.9, last_step: 100, best: 0.92 },
      { name: 'loss', goal: 'min', last: 0.03, last_step: 100, best: 0.03 },
    ],
  }),
  run({ run_id: '7.0', status: 'failed', status_reason: 'rank 1 exited with 1' }),
]

function Search() {
  return <div data-testid="search">{useLocation().search}</div>
}

function renderPage(path = '/experiments') {
  return renderWithProviders(
    <Routes>
      <Route
        path="/experiments"
        element={
          <>
            <ExperimentsPage />
            <Search />
          </>
        }
      />
    </Routes>,
    { path },
  )
}

describe('experiments page', () => {
  it('lists runs with a metric’s final and best values, picks two by keyboard, and compares them', async () => {
    const requests = mockFetch({
      ...csrfRoute(),
      'GET /api/experiments': () => json(runs),
      'POST /api/experiments/compare': () => json(comparison()),
    })
    renderPage()
    const table = await screen.findByRole('table', { name: 'Runs' })
    const newest = within(table).getByText('9.0').closest('tr')!
    expect(newest).toHaveTextContent('lr=0.01 batch_size=64')
    expect(newest).toHaveTextContent('0.5250') // final loss
    expect(newest).toHaveTextContent('0.5000') // best loss
    expect(within(table).getByRole('columnheader', { name: 'Final loss' })).toBeInTheDocument()
    const user = userEvent.setup()
    await user.selectOptions(screen.getByLabelText('Metric'), 'acc')
    expect(within(table).getByText('7.1').closest('tr')).toHaveTextContent('0.920')

    const compare = screen.getByRole('button', { name: 'Compare' })
    expect(compare).toBeDisabled()
    // Keyboard only: Tab to a run's checkbox, Space ticks it.
    screen.getByLabelText('Compare run 9.0 (lr-0.01)').focus()
    await user.keyboard(' ')
    await user.tab() // the run's job link
    await user.tab()
    expect(screen.getByLabelText('Compare run 7.1 (lr-0.1)')).toHaveFocus()
    await user.keyboard(' ')
    expect(screen.getByText('2 selected')).toBeInTheDocument()
    expect(compare).toBeEnabled()
    compare.focus()
    await user.keyboard('{Enter}')

    expect(screen.getByTestId('search')).toHaveTextContent('?runs=9.0%2C7.1')
    const panel = await screen.findByRole('region', { name: 'Comparison' })
    expect(requests.find((r) => r.path === '/api/experiments/compare')!.body).toEqual({ runs: ['9.0', '7.1'], points: 400 })
    // The curves: a chart per metric (uPlot itself does not draw in happy-dom).
    expect(await within(panel).findByRole('img', { name: 'loss chart' })).toBeInTheDocument()
    expect(within(panel).getByRole('img', { name: 'acc chart' })).toBeInTheDocument()

    const sideBySide = within(panel).getByRole('table', { name: 'Side by side' })
    const lr = within(sideBySide).getByRole('rowheader', { name: /^lr/ }).closest('tr')!
    expect(lr).toHaveClass('differs')
    expect(within(lr).getAllByRole('cell').map((c) => c.textContent)).toEqual(['0.1', '0.01'])
    const batch = within(sideBySide).getByRole('rowheader', { name: 'batch_size' }).closest('tr')!
    expect(batch).not.toHaveClass('differs')
    const finalLoss = within(sideBySide).getByRole('rowheader', { name: /^loss \(last value\)/ }).closest('tr')!
    expect(within(finalLoss).getAllByRole('cell')[0]).toHaveClass('compare-best')
    expect(within(finalLoss).getAllByRole('cell')[1]).not.toHaveClass('compare-best')

    await user.click(within(panel).getByLabelText(/Only what differs/))
    expect(within(sideBySide).queryByRole('rowheader', { name: 'batch_size' })).not.toBeInTheDocument()
    expect(within(sideBySide).getByRole('rowheader', { name: /^lr/ })).toBeInTheDocument()
  })

  it('opens a comparison from its link, with those runs ticked', async () => {
    const requests = mockFetch({
      ...csrfRoute(),
      'GET /api/experiments': () => json(runs),
      'POST /api/experiments/compare': () => json(comparison()),
    })
    renderPage('/experiments?runs=7.1,9.0,bogus')
    const panel = await screen.findByRole('region', { name: 'Comparison' })
    expect(await within(panel).findByRole('img', { name: 'loss chart' })).toBeInTheDocument()
    expect(requests.find((r) => r.path === '/api/experiments/compare')!.body).toEqual({ runs: ['7.1', '9.0'], points: 400 })
    expect(await screen.findByLabelText('Compare run 7.1 (lr-0.1)')).toBeChecked()
    expect(screen.getByLabelText('Compare run 9.0 (lr-0.01)')).toBeChecked()
    expect(screen.getByLabelText('Compare run 7.0 (lr-0.1)')).not.toBeChecked()
  })

  it('says so when a run in the link cannot be compared', async () => {
    mockFetch({
      ...csrfRoute(),
      'GET /api/experiments': () => json(runs),
      'POST /api/experiments/compare': () => json({ detail: "no such run: '5.0' (a run is <job id>.<attempt>)." }, 404),
    })
    renderPage('/experiments?runs=5.0,7.1')
    expect(await screen.findByRole('alert')).toHaveTextContent('Could not load the comparison: no such run')
  })
})
