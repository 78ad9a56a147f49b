import { render, screen } from '@testing-library/react'
import { describe, expect, it } from 'vitest'
import { PriorityBadge } from './PriorityBadge'
import { StatusBadge } from './StatusBadge'

describe('StatusBadge', () => {
  it('colours a status by its name, preempted included, and any other string in grey', () => {
    render(
      <>
        <StatusBadge status="preempted" title="preempted by #9" />
        <StatusBadge status="running" />
        <StatusBadge status="Something odd!" />
        <StatusBadge status="" />
      </>,
    )
    expect(screen.getByText('preempted')).toHaveClass('badge', 'badge-preempted')
    expect(screen.getByText('preempted')).toHaveAttribute('title', 'preempted by #9')
    expect(screen.getByText('running')).toHaveClass('badge-running')
    expect(screen.getByText('Something odd!').className).toBe('badge')
    expect(screen.getByText('unknown').className).toBe('badge')
  })
})

describe('PriorityBadge', () => {
  it('names the three levels and shows any other priority as its number', () => {
    render(
      <>
        <PriorityBadge priority={10} />
        <PriorityBadge priority={0} />
        <PriorityBadge priority={-10} />
        <PriorityBadge priority={25} />
      </>,
    )
    expect(screen.getByText('high')).toHaveClass('prio', 'prio-high')
    expect(screen.getByText('normal')).toHaveClass('prio-normal')
    expect(screen.getByText('low')).toHaveClass('prio-low')
    expect(screen.getByText('25')).toHaveClass('prio-high')
  })
})
