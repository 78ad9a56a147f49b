import { describe, expect, it } from 'vitest'
import { comparison, run } from '../../test/experiment-fixtures'
import {
  compareCharts,
  formatCell,
  hyperparameterSummary,
  listedMetricNames,
  MAX_COMPARED,
  parseRunIds,
  sideBySideRows,
  toggleRun,
} from './compare'

describe('compare: the URL and the selection', () => {
  it('reads well-formed run ids from ?runs=, each once, in order, at most 20', () => {
    expect(parseRunIds('7.1,9.0')).toEqual(['7.1', '9.0'])
    expect(parseRunIds(' 9.0 , 7.1,9.0,,x,7,7.a,1.2.3')).toEqual(['9.0', '7.1'])
    expect(parseRunIds(null)).toEqual([])
    const many = Array.from({ length: 30 }, (_, i) => `${i}.0`).join(',')
    expect(parseRunIds(many)).toHaveLength(MAX_COMPARED)
  })

  it('ticks runs in and out in the order picked, never past 20', () => {
    expect(toggleRun(['1.0'], '2.0')).toEqual(['1.0', '2.0'])
    expect(toggleRun(['1.0', '2.0', '3.0'], '2.0')).toEqual(['1.0', '3.0'])
    const full = Array.from({ length: MAX_COMPARED }, (_, i) => `${i}.0`)
    expect(toggleRun(full, '99.0')).toBe(full)
  })
})

describe('compare: the runs list', () => {
  it('offers every metric any run reported, loss first', () => {
    const runs = [
      run({ final_metrics: [{ name: 'acc', goal: 'max', last: 0.9, last_step: 10, best: 0.9 }] }),
      run({
        run_id: '8.0',
        final_metrics: [
          { name: 'zeta', goal: null, last: 1, last_step: 10, best: null },
          { name: 'loss', goal: 'min', last: 0.1, last_step: 10, best: 0.1 },
        ],
      }),
    ]
    expect(listedMetricNames(runs)).toEqual(['loss', 'acc', 'zeta'])
  })

  it('sums hyperparameters up on one line, nested ones dotted', () => {
    expect(hyperparameterSummary({ lr: 0.1, optim: { name: 'sgd', betas: [0.9, 0.99] }, empty: {} })).toBe(
      'lr=0.1 optim.name=sgd optim.betas=[0.9,0.99] empty={}',
    )
  })
})

describe('compare: charts and the side-by-side table', () => {
  it('draws one line per run in every chart, bucket means at the middle of their steps, loss first', () => {
    const charts = compareCharts(comparison())
    expect(charts.map((c) => c.name)).toEqual(['loss', 'acc'])
    const [loss, acc] = charts
    expect(loss.series.map((s) => s.label)).toEqual(['lr-0.1 · 7.1', 'lr-0.01 · 9.0'])
    expect(loss.series[0].points).toEqual([
      { x: 4.5, y: 3 },
      { x: 94.5, y: 0.03 },
    ])
    // The run without `acc` keeps its (empty) line, so each run has one colour in every chart.
    expect(acc.series.map((s) => s.points.length)).toEqual([2, 0])
  })

  it('puts hyperparameters, then final, then best metrics in rows, marking differences and the best run', () => {
    const rows = sideBySideRows(comparison())
    const byKey = Object.fromEntries(rows.map((r) => [r.key, r]))
    expect(rows.map((r) => r.key)).toEqual([
      'h:world_size',
      'h:args',
      'h:batch_size',
      'h:lr',
      'h:optim.name',
      'final:loss',
      'final:acc',
      'final:grad_norm',
      'best:loss',
      'best:acc',
    ])
    expect(byKey['h:lr']).toMatchObject({ cells: ['0.1', '0.01'], differs: true, best: [] })
    expect(byKey['h:batch_size']).toMatchObject({ cells: ['64', '64'], differs: false })
    expect(byKey['h:optim.name'].cells).toEqual(['sgd', '—'])
    // Lower loss wins; higher accuracy wins; a metric without a goal crowns nobody and has no best row.
    expect(byKey['final:loss']).toMatchObject({ cells: ['0.0300', '0.5250'], differs: true, best: [0] })
    expect(byKey['best:loss']).toMatchObject({ goal: 'min', best: [0] })
    expect(byKey['final:acc']).toMatchObject({ cells: ['0.900', '—'], differs: true, best: [] })
    expect(byKey['final:grad_norm']).toMatchObject({ cells: ['2', '2'], differs: false, best: [] })
  })

  it('tells values apart that read the same once rounded', () => {
    const data = comparison()
    data.metrics = [
      {
        name: 'loss',
        goal: 'min',
        values: [
          { last: 0.123401, last_step: 1, min: 0, max: 1, mean: 0, count: 1, best: 0.1 },
          { last: 0.123402, last_step: 1, min: 0, max: 1, mean: 0, count: 1, best: 0.1 },
        ],
      },
    ]
    const final = sideBySideRows(data).find((r) => r.key === 'final:loss')!
    expect(final.cells).toEqual(['0.1234', '0.1234'])
    expect(final).toMatchObject({ differs: true, best: [0] })
    expect(sideBySideRows(data).find((r) => r.key === 'best:loss')).toMatchObject({ differs: false, best: [] })
  })

  it('shows any value as one cell', () => {
    expect(formatCell(null)).toBe('—')
    expect(formatCell('')).toBe('—')
    expect(formatCell(false)).toBe('false')
    expect(formatCell(1e-4)).toBe('0.0001')
    expect(formatCell({ a: [1] })).toBe('{"a":[1]}')
  })
})
