import { describe, expect, it } from 'vitest'
import type { MetricEvent } from '../../../lib/types'
import { emptyJobEvents, mergeJobEvents } from './job-events'

const metric = (id: number, step: number, attempt: number): MetricEvent =>
  ({ id, job: 1, node: 1, node_rank: 0, rank: 0, attempt, ts: '2026-11-22T00:00:00Z', type: 'metric', step, loss: 1 }) as MetricEvent

describe('mergeJobEvents', () => {
  it('lets a recovered attempt replace the steps it redid, so the curve never runs backwards', () => {
    const first = [metric(1, 10, 0), metric(2, 20, 0), metric(3, 30, 0)]
    const resumed = [metric(10, 21, 1), metric(11, 31, 1)]
    const state = mergeJobEvents(mergeJobEvents(emptyJobEvents(), first), resumed)
    expect(state.metrics.map((m) => [m.step, m.attempt])).toEqual([[10, 0], [20, 0], [21, 1], [31, 1]])
  })

  it('drops events at or below the cursor', () => {
    const state = mergeJobEvents(emptyJobEvents(), [metric(5, 1, 0)])
    expect(mergeJobEvents(state, [metric(5, 1, 0), metric(4, 2, 0)])).toBe(state)
  })
})
