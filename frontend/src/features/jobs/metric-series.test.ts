import { describe, expect, it } from 'vitest'
import type { JobMetrics, MetricEvent, StateEvent } from '../../lib/types'
import { metricChart, resizesByAttempt, seriesFor } from './metric-series'

function jobState(id: number, attempt: number, status: 'dispatching' | 'running' | 'recovering', reason: string): StateEvent {
  return {
    id,
    job: 5,
    node: null,
    node_rank: null,
    rank: null,
    attempt,
    seq: null,
    type: 'state',
    ts: '2025-01-01T10:00:00Z',
    scope: 'job',
    status,
    previous: 'recovering',
    reason,
  }
}

function metric(id: number, attempt: number, step: number, loss: number): MetricEvent {
  return { id, job: 5, node: 51, node_rank: 0, rank: 0, attempt, seq: null, type: 'metric', ts: '2025-01-01T10:00:00Z', step, loss }
}

const history = (series: JobMetrics['series']): JobMetrics => ({ job: 5, names: ['loss'], from_step: 0, to_step: 400, bucket_steps: 50, series })

describe('elastic resizes on the metric charts', () => {
  it("reads each resized attempt from the job's dispatching events", () => {
    const states: StateEvent[] = [
      jobState(1, 0, 'dispatching', 'launching 3 node(s), world size 3'),
      jobState(2, 1, 'dispatching', 'shrunk from 3 to 2 nodes: machine m3 lost; launching 2 node(s), world size 2, attempt 1, resuming from s3://x'),
      jobState(3, 2, 'dispatching', 'grown from 2 to 3 nodes; launching 3 node(s), world size 3, attempt 2, resuming from s3://y'),
      jobState(4, 3, 'dispatching', 'shrunk from 2 to 1 nodes: machine m2 draining; launching 1 node(s), world size 1, attempt 3, from scratch (no checkpoint yet)'),
      // Same size again, another status, a node's event, a reason that only mentions a resize: none.
      jobState(5, 4, 'dispatching', 'launching 1 node(s), world size 1, attempt 4, from scratch (no checkpoint yet)'),
      jobState(6, 5, 'running', 'shrunk from 3 to 2 nodes'),
      { ...jobState(7, 6, 'dispatching', 'grown from 1 to 2 nodes; launching'), scope: 'node', status: 'running', previous: null },
      jobState(8, 7, 'dispatching', 'node 1 shrunk from 3 to 2 nodes'),
    ]
    expect(resizesByAttempt(states)).toEqual(
      new Map([
        [1, 'shrunk to 2 nodes'],
        [2, 'grown to 3 nodes'],
        [3, 'shrunk to 1 node'],
      ]),
    )
    expect(resizesByAttempt([])).toEqual(new Map())
  })

  it('names the resized attempts and marks their first step', () => {
    const resizes = new Map([
      [1, 'shrunk to 2 nodes'],
      [2, 'grown to 3 nodes'],
    ])
    const live = [metric(1, 0, 10, 2.5), metric(2, 0, 20, 2.1), metric(3, 1, 120, 1.8), metric(4, 1, 130, 1.7)]
    const chart = metricChart('loss', undefined, live, resizes)
    expect(chart.series.map((s) => s.label)).toEqual(['attempt 0', 'attempt 1 · shrunk to 2 nodes'])
    expect(chart.series[1].points).toEqual([
      { x: 120, y: 1.8 },
      { x: 130, y: 1.7 },
    ])
    // Attempt 2 has no points yet: no line, no mark.
    expect(chart.marks).toEqual([{ x: 120, label: 'shrunk to 2 nodes' }])
  })

  it("marks a resized attempt at its history's first step, not the first bucket's midpoint", () => {
    const resizes = new Map([[1, 'grown to 3 nodes']])
    const buckets = (first: number, count: number) =>
      Array.from({ length: count }, (_, i) => {
        const step = first + i * 50
        return { step, first_step: step, last_step: step + 49, min: 1, max: 3, mean: 2 - i / 10, count: 50 }
      })
    const past = history([
      { name: 'loss', attempt: 0, buckets: buckets(0, 2) },
      { name: 'loss', attempt: 1, buckets: buckets(100, 3) },
    ])
    const chart = metricChart('loss', past, [metric(9, 1, 250, 1.6)], resizes)
    expect(chart.series.map((s) => s.label)).toEqual(['attempt 0', 'attempt 1 · grown to 3 nodes'])
    expect(chart.series[1].points.map((p) => p.x)).toEqual([124.5, 174.5, 224.5, 250])
    expect(chart.marks).toEqual([{ x: 100, label: 'grown to 3 nodes' }])
  })

  it('labels every attempt as before without resizes', () => {
    const live = [metric(1, 0, 1, 2), metric(2, 1, 5, 1.5)]
    expect(seriesFor('loss', undefined, live).map((s) => s.label)).toEqual(['attempt 0', 'attempt 1'])
    expect(metricChart('loss', undefined, live).marks).toEqual([])
  })
})
