import { QueryClient } from '@tanstack/react-query'
import { describe, expect, it } from 'vitest'
import type { JobDetail, LogEvent, MetricEvent } from '../../../lib/types'
import { jobDetail, jobNode } from '../../../test/fixtures'
import { applyEventsToJob, applyJobStreamMessages } from './cache'
import { jobQueryKey } from './get-job'
import { jobEventsQueryKey, type JobEventsState } from './job-events'

const line = (id: number): LogEvent => ({
  id, job: 7, node: 1, node_rank: 0, rank: 0, attempt: 0, seq: id, ts: '2026-11-23T00:00:00Z', type: 'log',
  stream: 'stdout', line: `line ${id}`,
})

describe('applyJobStreamMessages', () => {
  it('merges a run of frames in one write, in order, around a job snapshot', () => {
    const client = new QueryClient()
    const writes: unknown[] = []
    client.getQueryCache().subscribe((e) => {
      if (e.type === 'updated' && e.query.queryKey[1] === 'events') writes.push(e.query.state.data)
    })
    applyJobStreamMessages(client, 7, [
      { type: 'events', events: [line(1), line(2)] },
      { type: 'events', events: [line(2), line(3)] }, // overlaps a replay: 2 comes once
      { type: 'job', job: jobDetail({ id: 7, status: 'running' }) },
      { type: 'events', events: [line(4)] },
      { type: 'replayed', last_id: 4 },
    ])
    const state = client.getQueryData<JobEventsState>(jobEventsQueryKey(7))
    expect(state?.logs.map((e) => e.id)).toEqual([1, 2, 3, 4])
    expect(state?.lastId).toBe(4)
    expect(writes).toHaveLength(2) // before the snapshot, and after it
    expect(client.getQueryData<JobDetail>(jobQueryKey(7))?.status).toBe('running')
  })

  it("keeps where the tail's older lines begin, for the log view to page them", () => {
    const client = new QueryClient()
    applyJobStreamMessages(client, 7, [
      { type: 'history', logs_before: 30, lines_per_rank: 2, last_id: 31 },
      { type: 'events', events: [line(30), line(31)] },
      { type: 'replayed', last_id: 31 },
    ])
    const state = client.getQueryData<JobEventsState>(jobEventsQueryKey(7))
    expect(state?.olderBefore).toBe(30)
    expect(state?.lastId).toBe(31)
  })

  it('has no older lines to page when the tail held every line', () => {
    const client = new QueryClient()
    applyJobStreamMessages(client, 7, [
      { type: 'history', logs_before: null, lines_per_rank: 500, last_id: 2 },
      { type: 'events', events: [line(1), line(2)] },
    ])
    expect(client.getQueryData<JobEventsState>(jobEventsQueryKey(7))?.olderBefore).toBeNull()
  })
})

describe('applyEventsToJob', () => {
  it("moves a node's step, loss and throughput and keeps the rest of what it reported (a Ray node's ports)", () => {
    const ray = {
      head: true, address: '10.0.0.1', gcs: '10.0.0.1:6379', ports: { dashboard: 8265 }, temp_dir: '/tmp/r',
      object_store_bytes: 1e9, num_cpus: 4, num_gpus: 0, dashboard_port: 8265,
    }
    const job = jobDetail({ id: 7, nodes: [jobNode({ progress: { step: 1, loss: 2, throughput: null, ray } })] })
    const metric: MetricEvent = {
      id: 3, job: 7, node: 51, node_rank: 0, rank: 0, attempt: 0, seq: 3, ts: '2026-11-23T00:00:00Z', type: 'metric',
      step: 5, throughput: 12,
    }
    expect(applyEventsToJob(job, [metric]).nodes[0].progress).toEqual({ step: 5, loss: 2, throughput: 12, ray })
  })

  it('takes a priority change as the priority, keeping why the job waits; a transition takes its reason', () => {
    const job = jobDetail({ id: 7, status: 'queued', status_reason: 'waiting for 2 machines', priority: -10 })
    const base = { id: 4, job: 7, node: null, node_rank: null, rank: null, attempt: 0, seq: 4,
      ts: '2026-11-29T00:00:00Z', type: 'state', scope: 'job' } as const
    const raised = applyEventsToJob(job, [{ ...base, status: 'queued', previous: 'queued', priority: 0,
      previous_priority: -10, reason: 'priority changed from -10 (low) to 0 (normal) by admin' }])
    expect(raised).toMatchObject({ status: 'queued', status_reason: 'waiting for 2 machines', priority: 0 })
    const started = applyEventsToJob(raised, [{ ...base, id: 5, status: 'planning', previous: 'queued', reason: 'starting' }])
    expect(started).toMatchObject({ status: 'planning', status_reason: 'starting' })
  })
})
