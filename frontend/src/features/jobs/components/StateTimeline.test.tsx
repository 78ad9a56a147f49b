import { render, screen, within } from '@testing-library/react'
import { describe, expect, it } from 'vitest'
import type { JobStatus, NodeStatus, StalledEvent, StateEvent } from '../../../lib/types'
import { StateTimeline } from './StateTimeline'

const base = { job: 5, rank: null, seq: null, ts: '2025-01-01T10:00:00Z' }

function jobState(id: number, previous: JobStatus, status: JobStatus, reason = '', attempt = 0): StateEvent {
  return { ...base, id, node: null, node_rank: null, attempt, type: 'state', scope: 'job', previous, status, reason }
}

function nodeState(id: number, nodeRank: number, previous: NodeStatus, status: NodeStatus, reason = '', attempt = 0): StateEvent {
  return { ...base, id, node: 50 + nodeRank, node_rank: nodeRank, attempt, type: 'state', scope: 'node', previous, status, reason }
}

const stall: StalledEvent = {
  ...base, id: 6, node: 51, node_rank: 1, rank: 1, attempt: 0, type: 'stalled', step: 40, stalled_for: 12, timeout: 10,
  process_state: 'stopped', last_line: 'step 40', stack: 'Thread 1', hostname: 'beta', on_stall: 'recover',
}

describe('StateTimeline', () => {
  it('lists every job and node transition with its reason, oldest first, recoveries and stalls marked', () => {
    const states = [
      jobState(1, 'queued', 'running', 'dispatched to 2 nodes'),
      nodeState(3, 1, 'running', 'failed', 'exit code 1'),
      jobState(7, 'running', 'recovering', 'node 1 failed: exit code 1'),
      jobState(9, 'recovering', 'running', 'resumed from step 40', 1),
      jobState(12, 'running', 'completed', '', 1),
    ]
    render(<StateTimeline states={states} stalls={[stall]} />)
    const items = within(screen.getByRole('list', { name: 'Transitions' })).getAllByRole('listitem')
    expect(items.map((li) => li.className)).toEqual([
      'tl-entry tl-job',
      'tl-entry tl-failure',
      'tl-entry tl-stall',
      'tl-entry tl-recovery',
      'tl-entry tl-recovery',
      'tl-entry tl-done',
    ])
    expect(items[1]).toHaveTextContent('node 1running → failedfailureexit code 1')
    expect(items[2]).toHaveTextContent('rank 1stalled at step 40stallno new step for 12 s on beta (process stopped); on_stall: recover ended its node')
    expect(items[3]).toHaveTextContent('jobrunning → recoveringrecoverynode 1 failed: exit code 1')
    expect(items[4]).toHaveTextContent('job · a1recovering → running')
    expect(screen.getByText('6 events, 1 recovery, 1 stall')).toBeInTheDocument()
  })

  it('marks a preemption, and shows a status it does not know as it is', () => {
    // Statuses as plain strings: the timeline names any status, and marks the preemption ones.
    const preempting = 'preempting' as JobStatus
    const preempted = 'preempted' as JobStatus
    const states = [
      jobState(1, 'queued', 'running', 'dispatched to 1 node'),
      jobState(3, 'running', preempting, 'preempted by #9 (high): vision reclaims its quota'),
      jobState(4, preempting, preempted, 'committed a checkpoint at step 40; back in the queue'),
      jobState(6, preempted, 'planning', '', 1),
      jobState(8, 'running', 'hibernating' as JobStatus, ''),
    ]
    render(<StateTimeline states={states} stalls={[]} />)
    const items = within(screen.getByRole('list', { name: 'Transitions' })).getAllByRole('listitem')
    expect(items.map((li) => li.className)).toEqual([
      'tl-entry tl-job',
      'tl-entry tl-preemption',
      'tl-entry tl-preemption',
      'tl-entry tl-job',
      'tl-entry tl-job',
    ])
    expect(items[1]).toHaveTextContent('jobrunning → preemptingpreemptionpreempted by #9 (high)')
    expect(items[2]).toHaveTextContent('jobpreempting → preemptedpreemptioncommitted a checkpoint at step 40')
    expect(items[4]).toHaveTextContent('jobrunning → hibernating')
    expect(screen.getByText('5 events, 1 preemption')).toBeInTheDocument()
  })

  it('says what a rank that reports no steps did when it hung without a word', () => {
    const silent: StalledEvent = { ...stall, id: 8, rank: 0, step: 0, stalled_for: 4.5, timeout: 4, silent: true,
      process_state: 'sleeping', waits_in: '' }
    render(<StateTimeline states={[jobState(1, 'queued', 'running')]} stalls={[silent]} />)
    const items = within(screen.getByRole('list', { name: 'Transitions' })).getAllByRole('listitem')
    expect(items[1]).toHaveTextContent('rank 0hung without a wordstallnothing printed or reported, no CPU used, every thread '
      + 'waiting for 4.5 s on beta (process sleeping; outside any collective); on_stall: recover ended its node')
  })

  it('says so before the first transition', () => {
    render(<StateTimeline states={[]} stalls={[]} />)
    expect(screen.getByText('No transitions yet.')).toBeInTheDocument()
  })
})
