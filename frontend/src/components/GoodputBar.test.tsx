import { render, screen, within } from '@testing-library/react'
import { describe, expect, it } from 'vitest'
import { formatSeconds, goodputShares } from '../lib/goodput'
import { goodputParts } from '../test/queue-fixtures'
import { GoodputBar, GoodputLegend } from './GoodputBar'

describe('GoodputBar', () => {
  it('draws a segment per category that got time, as wide as its share, in the order of a job’s life', () => {
    const parts = goodputParts({ training: 300, queued: 100, lost_work: 50, idle: 50 })
    render(<GoodputBar parts={parts} label="The whole job" />)
    const bar = screen.getByRole('img')
    expect(bar).toHaveAttribute('aria-label', 'The whole job: Queued 20.0%, Training 60.0%, Lost work 10.0%, Idle 10.0%')
    const segments = Array.from(bar.querySelectorAll<HTMLElement>('.goodput-segment'))
    expect(segments.map((s) => [s.dataset.category, s.style.width])).toEqual([
      ['queued', '20%'],
      ['training', '60%'],
      ['lost_work', '10%'],
      ['idle', '10%'],
    ])
    expect(segments[1]).toHaveAttribute('title', 'Training: 5m 0s (60.0%), stepping: the productive time')
  })

  it('is empty before any time counted', () => {
    render(<GoodputBar parts={goodputParts()} label="Attempt 0" />)
    expect(screen.getByRole('img')).toHaveAttribute('aria-label', 'Attempt 0: no time yet')
    expect(goodputShares(goodputParts())).toEqual([])
  })

  it('keys each category with its seconds and share', () => {
    render(<GoodputLegend parts={goodputParts({ training: 45, checkpoint: 4.5, hang: 3600 + 90 })} />)
    const items = within(screen.getByRole('list', { name: 'Where the time went' })).getAllByRole('listitem')
    expect(items.map((i) => i.textContent)).toEqual(['Training 45s 1.2%', 'Checkpoint 4.5s 0.1%', 'Hang 1h 1m 98.7%'])
    expect(formatSeconds(0.25)).toBe('0.3s')
  })
})
