import { render, screen, within } from '@testing-library/react'
import { describe, expect, it } from 'vitest'
import type { StragglerEvent } from '../../../lib/types'
import { jobDetail } from '../../../test/fixtures'
import { StragglersPanel } from './StragglersPanel'

const evidence = 'its process was stopped 62% of the time (SIGSTOP, a debugger?)'
const named: StragglerEvent = {
  id: 7, job: 5, node: 11, node_rank: 1, rank: 3, attempt: 0, seq: null, ts: '2026-12-02T01:00:00Z', type: 'straggler',
  state: 'named', machine: 'box1', own_step_s: 0.44, median_s: 0.1, ratio: 4.4, policy: 'replace', evidence,
  summary: `rank 3 on machine box1 takes 0.44 s of its own per step against a median of 0.1 s for the other ranks (4.4x): ${evidence}`,
}

describe('StragglersPanel', () => {
  it('shows nothing while every rank keeps up', () => {
    const { container } = render(<StragglersPanel job={jobDetail()} events={[]} />)
    expect(container).toBeEmptyDOMElement()
  })

  it("names each straggler with its own step against the others' median, what its machine shows and what replace does", () => {
    const job = jobDetail({ attempt: 0 })
    job.progress = {
      ...job.progress,
      stragglers: [{ rank: 3, machine: 'box1', node_rank: 1, own_step_s: 0.44, median_s: 0.1, ratio: 4.4, step_s: 0.5,
        slow_since: 1_700_000_000, evidence, policy: 'replace', replace: 'pending' }],
    }
    render(<StragglersPanel job={job} events={[named]} />)
    const [row] = within(screen.getByRole('table')).getAllByRole('row').slice(1)
    expect(row).toHaveTextContent('3box10.440 s (4.4x)0.100 s')
    expect(row).toHaveTextContent(evidence)
    expect(row).toHaveTextContent('onto a hot spare at the next committed checkpoint')
    expect(screen.getByText(/attempt 0: rank 3 on machine box1 takes 0.44 s/)).toBeInTheDocument()
  })

  it('keeps the history once the straggler keeps up again', () => {
    const cleared: StragglerEvent = { ...named, id: 9, state: 'cleared', summary: 'rank 3 keeps up again (0.12 s of its own per step)' }
    render(<StragglersPanel job={jobDetail()} events={[named, cleared]} />)
    expect(screen.getByText('Every rank keeps up now.')).toBeInTheDocument()
    const items = screen.getAllByRole('listitem')
    expect(items[0]).toHaveTextContent('rank 3 keeps up again')
    expect(items[1]).toHaveTextContent('rank 3 on machine box1 takes 0.44 s')
  })
})
