import { render, screen, within } from '@testing-library/react'
import { describe, expect, it } from 'vitest'
import type { JobDetail } from '../../../lib/types'
import { jobDetail } from '../../../test/fixtures'
import { LinksPanel } from './LinksPanel'

// Two machines with two networks, the routed one throttled: what a master's preflight reports.
const links: JobDetail['links'] = {
  attempt: 0,
  measured_at: 1_764_000_000,
  seconds: 0.41,
  machines: { '0': 'box0', '1': 'box1' },
  networks: [
    { network: '10.0.0.0/24', interfaces: { '0': 'eth0', '1': 'eth0' }, slowest_mb_per_s: 6.1, latency_ms: 0.9, usable: true,
      registered: true, chosen: false },
    { network: '10.9.0.0/24', interfaces: { '0': 'eth1', '1': 'eth1' }, slowest_mb_per_s: 480, latency_ms: 0.05, usable: true,
      registered: false, chosen: true },
  ],
  pairs: [
    { network: '10.0.0.0/24', a: 0, b: 1, mb_per_s: 6.1, latency_ms: 0.9, bytes: 2_500_000, error: '', flagged: true },
    { network: '10.9.0.0/24', a: 0, b: 1, mb_per_s: 480, latency_ms: 0.05, bytes: 190_000_000, error: '', flagged: false },
  ],
  median_mb_per_s: 243,
  chosen: '10.9.0.0/24',
  addresses: { box0: '10.9.0.2', box1: '10.9.0.3' },
  master_address: '10.9.0.2',
  summary: 'traffic pinned to 10.9.0.0/24. 10.0.0.0/24 between box0 and box1: 6.1 MB/s, below half the median (243 MB/s)',
}

describe('LinksPanel', () => {
  it('shows nothing for a job whose links were never measured', () => {
    const { container } = render(<LinksPanel job={jobDetail()} />)
    expect(container).toBeEmptyDOMElement()
  })

  it('maps each network, marks the one the traffic takes and flags the slow pair both ways', () => {
    render(<LinksPanel job={jobDetail({ links })} />)
    expect(screen.getByText(/measured in 0.4 s on attempt 0 · median 243 MB\/s/)).toBeInTheDocument()
    expect(screen.getByText(/below half the median/)).toHaveClass('text-bad')

    const routed = screen.getByRole('figure', { name: 'Network 10.0.0.0/24' })
    const fabric = screen.getByRole('figure', { name: 'Network 10.9.0.0/24' })
    expect(fabric).toHaveClass('chosen')
    expect(within(fabric).getByText("the job's traffic")).toBeInTheDocument()
    expect(routed).not.toHaveClass('chosen')
    expect(within(routed).getByText(/the registered addresses/)).toBeInTheDocument()

    // box0 -> box1 and box1 -> box0 are the one pair measured once.
    const slow = within(routed).getAllByText('6 MB/s')
    expect(slow).toHaveLength(2)
    for (const cell of slow) expect(cell.closest('td')).toHaveClass('flagged')
    const fast = within(fabric).getAllByText('480 MB/s')
    expect(fast).toHaveLength(2)
    for (const cell of fast) expect(cell.closest('td')).not.toHaveClass('flagged')
    expect(within(fabric).getAllByLabelText('itself')).toHaveLength(2)
  })

  it('says a pair that could not connect failed, with why', () => {
    const failed = {
      ...links,
      pairs: [{ ...links.pairs![1], mb_per_s: 0, error: 'connection refused' }, links.pairs![0]],
    }
    render(<LinksPanel job={jobDetail({ links: failed })} />)
    const fabric = screen.getByRole('figure', { name: 'Network 10.9.0.0/24' })
    const cells = within(fabric).getAllByText('failed')
    expect(cells).toHaveLength(2)
    expect(cells[0]).toHaveAttribute('title', 'connection refused')
  })
})
