import { describe, expect, it } from 'vitest'
import type { JobEvent, LogEvent, MetricEvent } from '../../../lib/types'
import { emptyJobEvents, LOG_LINE_CAP, mergeJobEvents } from './job-events'

const metric = (id: number, step: number, attempt: number): MetricEvent => ({
  id, job: 1, node: 1, node_rank: 0, rank: 0, attempt, seq: null, ts: '2026-11-22T00:00:00Z', type: 'metric', step, loss: 1,
})

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

describe('mergeJobEvents keeps preflight and stall reports', () => {
  it('files them apart from logs and metrics', () => {
    const base = { job: 1, node: 1, node_rank: 1, rank: null, attempt: 0, seq: null, ts: '2026-11-22T00:00:00Z' }
    const reports: JobEvent[] = [
      { ...base, id: 1, type: 'preflight', ok: false, error: 'cannot reach the master at 10.0.0.1:29500: no route to host' },
      { ...base, id: 2, rank: 1, type: 'stalled', step: 5, stalled_for: 8, timeout: 8, process_state: 'stopped',
        last_line: 'x', stack: 'Thread 1', hostname: 'h', on_stall: 'recover' },
    ]
    const state = mergeJobEvents(emptyJobEvents(), reports)
    expect(state.preflight.map((e) => e.error)).toEqual(['cannot reach the master at 10.0.0.1:29500: no route to host'])
    expect(state.stalls.map((e) => [e.rank, e.step])).toEqual([[1, 5]])
    expect(state.logs).toEqual([])
  })

  it("counts a function job's results, once each, so the results are fetched again", () => {
    const base = { job: 1, node: 1, node_rank: 0, attempt: 0, seq: null, ts: '2026-11-22T00:00:00Z' }
    const returned: JobEvent[] = [
      { ...base, id: 1, rank: 0, type: 'result', ok: true },
      { ...base, id: 2, rank: 1, type: 'result', ok: false },
    ]
    const state = mergeJobEvents(emptyJobEvents(), returned)
    expect(state.results).toBe(2)
    // A replay overlapping what was seen counts only what is new.
    expect(mergeJobEvents(state, [...returned, { ...base, id: 3, rank: 2, type: 'result', ok: true }]).results).toBe(3)
  })
})

describe('mergeJobEvents keeps the timeline and a bounded log window', () => {
  const base = { job: 1, node: 1, node_rank: 0, rank: 0, attempt: 0, seq: null, ts: '2026-11-22T00:00:00Z' }

  it('keeps state transitions in order', () => {
    const transitions: JobEvent[] = [
      { ...base, id: 1, type: 'state', scope: 'job', previous: 'queued', status: 'running', reason: '' },
      { ...base, id: 2, type: 'state', scope: 'node', previous: 'running', status: 'failed', reason: 'exit code 1' },
    ]
    const state = mergeJobEvents(emptyJobEvents(), transitions)
    expect(state.states.map((e) => e.status)).toEqual(['running', 'failed'])
  })

  it('drops the oldest lines past the window and says it did', () => {
    const lines = (from: number, count: number) =>
      Array.from({ length: count }, (_, i): LogEvent => ({ ...base, id: from + i, type: 'log', stream: 'stdout', line: `l${from + i}` }))
    let state = mergeJobEvents(emptyJobEvents(), lines(1, LOG_LINE_CAP))
    expect(state.olderBefore).toBeNull()
    state = mergeJobEvents(state, lines(LOG_LINE_CAP + 1, 10))
    expect(state.logs).toHaveLength(LOG_LINE_CAP)
    expect(state.logs[0].id).toBe(11)
    expect(state.olderBefore).toBe(11)
  })
})
