import { QueryClient } from '@tanstack/react-query'
import { describe, expect, it } from 'vitest'
import type { JobDetail, LogEvent } from '../../../lib/types'
import { jobDetail } from '../../../test/fixtures'
import { applyJobStreamMessages } from './cache'
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
})
