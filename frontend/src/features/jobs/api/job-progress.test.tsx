import { QueryClient } from '@tanstack/react-query'
import { screen, within } from '@testing-library/react'
import { describe, expect, it } from 'vitest'
import type { JobDetail, JobSummary, MetricEvent } from '../../../lib/types'
import { jobDetail, jobNode, progress } from '../../../test/fixtures'
import { renderWithProviders } from '../../../test/render'
import { JobsTable } from '../components/JobsTable'
import { applyJobStreamMessages } from './cache'
import { jobQueryKey } from './get-job'
import { jobsQueryKey } from './get-jobs'

// One rank's report; the job's throughput is every rank's summed by the server (jobs/control/metrics.py).
const metric = (id: number, rank: number, step: number, throughput: number): MetricEvent => ({
  id, job: 7, node: 51, node_rank: 0, rank, attempt: 0, seq: id, ts: '2026-11-23T00:00:00Z', type: 'metric',
  step, throughput,
})

const running = (throughput: number): JobDetail =>
  jobDetail({ id: 7, world_size: 4, nodes: [jobNode()], progress: progress({ step: 10, throughput }) })

describe("a job's throughput", () => {
  it("is the server's sum of every rank, never rank 0's own, until the server sends a new one", () => {
    const client = new QueryClient()
    client.setQueryData<JobSummary[]>(jobsQueryKey, [])
    applyJobStreamMessages(client, 7, [
      { type: 'job', job: running(40) },
      { type: 'events', prev: 0, last: 2, count: 2, events: [metric(1, 0, 11, 10.5), metric(2, 1, 11, 9.5)] },
    ])
    expect(client.getQueryData<JobDetail>(jobQueryKey(7))?.progress.throughput).toBe(40)

    applyJobStreamMessages(client, 7, [{ type: 'job', job: running(41.5) }])
    renderWithProviders(<JobsTable jobs={client.getQueryData<JobSummary[]>(jobsQueryKey) ?? []} />)
    const row = screen.getByText('char-gpt').closest('tr') as HTMLElement
    expect(within(row).getByText('41.5/s')).toBeInTheDocument()
    expect(within(row).queryByText('10.5/s')).toBeNull()
  })
})
