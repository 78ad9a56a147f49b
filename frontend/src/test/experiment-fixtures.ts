import type { Comparison } from '../features/experiments/api/compare-runs'
import type { Run } from '../features/experiments/api/get-runs'

type RunOut = Comparison['runs'][number]

export function runOut(overrides: Partial<RunOut> = {}): RunOut {
  return {
    run_id: '7.0',
    job: 7,
    attempt: 0,
    name: 'lr-0.1',
    project: 'default',
    owner: 'ada',
    status: 'completed',
    status_reason: '',
    world_size: 4,
    started_at: '2026-01-02T10:00:00Z',
    finished_at: '2026-01-02T11:00:00Z',
    hyperparameters: { lr: 0.1, batch_size: 64 },
    ...overrides,
  }
}

export function run(overrides: Partial<Run> = {}): Run {
  return { ...runOut(), final_metrics: [], ...overrides }
}

const bucket = (step: number, mean: number) => ({ step, first_step: step, last_step: step + 9, min: mean, max: mean, mean, count: 10 })

/** Two runs of different learning rates: 7.1 ends lower on loss and alone reported `acc`; `grad_norm` has no goal. */
export function comparison(): Comparison {
  const a = runOut({ run_id: '7.1', attempt: 1, hyperparameters: { lr: 0.1, batch_size: 64, optim: { name: 'sgd' } } })
  const b = runOut({ run_id: '9.0', job: 9, name: 'lr-0.01', hyperparameters: { lr: 0.01, batch_size: 64 } })
  return {
    runs: [a, b],
    hyperparameters: [
      { name: 'world_size', values: [4, 4], differs: false },
      { name: 'args', values: ['--steps 100', '--steps 100'], differs: false },
      { name: 'batch_size', values: [64, 64], differs: false },
      { name: 'lr', values: [0.1, 0.01], differs: true },
      { name: 'optim.name', values: ['sgd', null], differs: true },
    ],
    metrics: [
      {
        name: 'acc',
        goal: 'max',
        values: [
          { last: 0.9, last_step: 100, min: 0.1, max: 0.92, mean: 0.5, count: 10, best: 0.92 },
          { last: null, last_step: null, min: null, max: null, mean: null, count: 0, best: null },
        ],
      },
      {
        name: 'loss',
        goal: 'min',
        values: [
          { last: 0.03, last_step: 100, min: 0.03, max: 3, mean: 0.5, count: 100, best: 0.03 },
          { last: 0.525, last_step: 80, min: 0.525, max: 2.5, mean: 0.8, count: 80, best: 0.525 },
        ],
      },
      {
        name: 'grad_norm',
        goal: null,
        values: [
          { last: 2, last_step: 100, min: 1, max: 5, mean: 2, count: 100, best: null },
          { last: 2, last_step: 80, min: 1, max: 4, mean: 2, count: 80, best: null },
        ],
      },
    ],
    from_step: 0,
    to_step: 99,
    bucket_steps: 10,
    series: [
      { name: 'acc', runs: [[bucket(0, 0.1), bucket(90, 0.9)], []] },
      { name: 'loss', runs: [[bucket(0, 3), bucket(90, 0.03)], [bucket(0, 2.5), bucket(70, 0.525)]] },
    ],
  }
}
