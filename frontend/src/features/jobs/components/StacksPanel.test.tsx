import { QueryClientProvider } from '@tanstack/react-query'
import { render, screen, waitFor } from '@testing-library/react'
import userEvent from '@testing-library/user-event'
import { describe, expect, it } from 'vitest'
import type { StacksEvent } from '../../../lib/types'
import { jobDetail } from '../../../test/fixtures'
import { csrfRoute, json, mockFetch } from '../../../test/http'
import { testQueryClient } from '../../../test/render'
import { StacksPanel } from './StacksPanel'

const answer = (id: number, request: string, nodeRank: number, ranks: number[]): StacksEvent => ({
  id, job: 5, node: 10 + nodeRank, node_rank: nodeRank, rank: null, attempt: 0, seq: null, ts: '2026-11-29T23:00:00Z',
  type: 'stacks', request, hostname: `host-${nodeRank}`,
  ranks: ranks.map((rank) => ({
    rank, pid: 100 + rank, process_state: 'sleeping', stack: `Thread ${rank} (idle): "MainThread"\n    train (mlp_ddp.py:138)`,
    waits_in: rank === 0 ? '' : 'all_reduce (torch/distributed/distributed_c10d.py:2501)', frame: 'train (mlp_ddp.py:138)',
  })),
})

describe('StacksPanel', () => {
  it('shows nothing for a job that is not running and never asked', () => {
    const { container } = render(
      <QueryClientProvider client={testQueryClient()}>
        <StacksPanel job={jobDetail({ status: 'completed' })} stacks={[]} />
      </QueryClientProvider>,
    )
    expect(container).toBeEmptyDOMElement()
  })

  it("asks every running node and shows the latest request's ranks in rank order", async () => {
    const asked: unknown[] = []
    const requests = mockFetch({ ...csrfRoute(), 'POST /api/jobs/5/stacks': () => {
      asked.push(true)
      return json({ request: 'r2', nodes: [{ node_rank: 0, machine: 'alpha' }, { node_rank: 1, machine: 'beta' }] }, 202)
    } })
    const older = [answer(1, 'r1', 0, [0, 1])]
    const client = testQueryClient()
    const panel = (stacks: StacksEvent[]) => (
      <QueryClientProvider client={client}>
        <StacksPanel job={jobDetail({ status: 'running' })} stacks={stacks} />
      </QueryClientProvider>
    )
    const { rerender } = render(panel(older))
    expect(screen.getByText(/rank 1 on host-0 \(node 0, pid 101, sleeping\): waits in all_reduce/)).toBeInTheDocument()
    await userEvent.setup().click(screen.getByRole('button', { name: 'Read stacks again' }))
    await waitFor(() => expect(asked).toHaveLength(1))
    expect(requests.filter((r) => r.method === 'POST').map((r) => r.path)).toEqual(['/api/jobs/5/stacks'])
    await waitFor(() => expect(screen.getByText(/0 of 2 node\(s\) answered/)).toBeInTheDocument())
    rerender(panel([...older, answer(2, 'r2', 1, [3, 2])]))
    expect(screen.getByText(/1 of 2 node\(s\) answered/)).toBeInTheDocument()
    const summaries = screen.getAllByText(/^rank \d on host-1/).map((e) => e.textContent)
    expect(summaries).toEqual([
      'rank 2 on host-1 (node 1, pid 102, sleeping): waits in all_reduce (torch/distributed/distributed_c10d.py:2501)',
      'rank 3 on host-1 (node 1, pid 103, sleeping): waits in all_reduce (torch/distributed/distributed_c10d.py:2501)',
    ])
    expect(screen.queryByText(/on host-0/)).not.toBeInTheDocument()
  })
})
