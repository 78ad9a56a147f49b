import { render, screen } from '@testing-library/react'
import { describe, expect, it } from 'vitest'
import type { PreflightEvent, StalledEvent } from '../../../lib/types'
import { jobDetail } from '../../../test/fixtures'
import { HealthPanel } from './HealthPanel'

const base = { job: 1, node: 1, rank: null, attempt: 1, seq: null, ts: '2026-11-22T00:00:00Z' }

describe('HealthPanel', () => {
  it('shows nothing until a node has something to say', () => {
    const { container } = render(<HealthPanel job={jobDetail()} preflight={[]} stalls={[]} />)
    expect(container).toBeEmptyDOMElement()
  })

  it("names the current attempt's preflight results, the stall verdict and each rank's stack", () => {
    const job = jobDetail({ attempt: 1 })
    job.progress = {
      ...job.progress,
      stall: { attempt: 1, kind: 'collective', summary: 'all 2 ranks stopped together at step 41: a hung collective', ranks: {},
        culprits: [], quarantined: [] },
    }
    const preflight: PreflightEvent[] = [
      { ...base, id: 3, node_rank: 1, type: 'preflight', ok: true, role: 'node', master: '10.0.0.1:29500',
        local_address: '10.0.0.2', interface: 'eth0', connect_ms: 0.4, hostname: 'beta', torch: '2.13.0', python: '3.11.7' },
      { ...base, id: 1, attempt: 0, node_rank: 1, type: 'preflight', ok: false, error: 'old attempt' },
    ]
    const stalls: StalledEvent[] = [
      { ...base, id: 9, node_rank: 1, rank: 1, type: 'stalled', step: 41, stalled_for: 8, timeout: 8,
        process_state: 'stopped', last_line: 'step 41', stack: 'Thread 7 (idle): "MainThread"', hostname: 'beta', on_stall: 'recover' },
    ]
    render(<HealthPanel job={job} preflight={preflight} stalls={stalls} />)
    expect(screen.getByText(/reached the master 10.0.0.1:29500 from 10.0.0.2 through eth0/)).toBeInTheDocument()
    expect(screen.queryByText(/old attempt/)).not.toBeInTheDocument()
    expect(screen.getByRole('alert')).toHaveTextContent('Stalled: all 2 ranks stopped together at step 41')
    expect(screen.getByText(/rank 1 on beta: no new step for 8 s after step 41/)).toBeInTheDocument()
    expect(screen.getByText('Thread 7 (idle): "MainThread"')).toBeInTheDocument()
  })

  it('names the rank that holds the job, where its stack was, the deadline that applied and the machine quarantined', () => {
    const job = jobDetail({ attempt: 0 })
    const summary = 'rank 1 on machine beta (process stopped, SIGSTOP?) holds the job: rank 0 waits in a collective at step 41'
    job.progress = {
      ...job.progress,
      stall: { attempt: 0, kind: 'culprit', summary, ranks: {}, quarantined: ['beta'],
        culprits: [{ rank: 1, ranks: [1], machine: 'beta', node_rank: 1, cause: 'process', evidence: 'process stopped, SIGSTOP?' }] },
    }
    const stall = { ...base, attempt: 0, type: 'stalled' as const, step: 41, stalled_for: 15, timeout: 15, last_line: '',
      stack: '', on_stall: 'recover' as const,
      timeout_basis: 'auto: 2 x the p95 step time (0.21 s between the last 64 steps reported), at least 15 s' }
    const stalls: StalledEvent[] = [
      { ...stall, id: 8, node_rank: 0, rank: 0, process_state: 'sleeping', hostname: 'alpha',
        waits_in: '_engine_run_backward (torch/autograd/graph.py:979)', frame: '_engine_run_backward (torch/autograd/graph.py:979)' },
      { ...stall, id: 9, node_rank: 1, rank: 1, process_state: 'stopped', hostname: 'beta', waits_in: '', frame: 'train (mlp_ddp.py:138)' },
    ]
    render(<HealthPanel job={job} preflight={[]} stalls={stalls} />)
    expect(screen.getByRole('alert')).toHaveTextContent(`Stalled: ${summary}`)
    expect(screen.getByText(/Quarantined .*: beta/)).toBeInTheDocument()
    expect(screen.getAllByText('deadline 15 s: auto: 2 x the p95 step time (0.21 s between the last 64 steps reported), at least 15 s')).toHaveLength(2)
    expect(screen.getByText(/rank 1 on beta: .*\(process stopped; outside any collective, in train \(mlp_ddp.py:138\)\)/)).toBeInTheDocument()
    expect(screen.getByText(/rank 0 on alpha: .*waits in _engine_run_backward/)).toBeInTheDocument()
  })
})
