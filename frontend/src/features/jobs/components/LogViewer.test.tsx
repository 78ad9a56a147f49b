import { act, fireEvent, render, screen, waitFor, within } from '@testing-library/react'
import userEvent from '@testing-library/user-event'
import { describe, expect, it } from 'vitest'
import type { LogEvent } from '../../../lib/types'
import { json, mockFetch } from '../../../test/http'
import { withElementSize } from '../../../test/layout'
import { LOG_ROW_PX, LogViewer } from './LogViewer'

const BOX_HEIGHT = 460
withElementSize(900, BOX_HEIGHT)

function line(id: number, text: string, rank = id % 4, stream: LogEvent['stream'] = 'stdout'): LogEvent {
  return { id, job: 5, node: 51, node_rank: rank >> 1, rank, attempt: 0, seq: null, type: 'log', ts: '2025-01-01T10:00:00Z', stream, line: text }
}

/** "[rank N] text" of each row in the DOM, top to bottom. */
function rows(): string[] {
  return Array.from(screen.getByTestId('log-box').querySelectorAll('.log-line')).map((el) => {
    const copy = el.cloneNode(true) as HTMLElement
    copy.querySelector('.log-ts')?.remove()
    return copy.textContent!.trim()
  })
}

const many = (count: number, text = (i: number) => `step ${i}`) => Array.from({ length: count }, (_, i) => line(i + 1, text(i + 1)))

/** What the browser does after the page moves the scroll position: tell the list it scrolled. */
function scrolled() {
  fireEvent.scroll(screen.getByTestId('log-box'))
}

describe('LogViewer', () => {
  it('renders a 200,000-line log as the few rows on screen, following the tail', () => {
    render(<LogViewer jobId={5} logs={many(200_000)} olderBefore={null} />)
    expect(screen.getByTestId('log-count')).toHaveTextContent('200,000 lines')
    scrolled()
    const shown = rows()
    expect(shown.length).toBeLessThan(BOX_HEIGHT / LOG_ROW_PX + 50)
    expect(shown.at(-1)).toBe('[rank 0] step 200000')
  })

  it('filters by rank and by stream', async () => {
    const logs = [line(1, 'a', 0), line(2, 'b', 1), line(3, 'oops', 1, 'stderr'), line(4, 'c', 0)]
    render(<LogViewer jobId={5} logs={logs} olderBefore={null} />)
    await userEvent.selectOptions(screen.getByLabelText('Filter by rank'), '1')
    expect(rows()).toEqual(['[rank 1] b', '[rank 1] oops'])
    await userEvent.selectOptions(screen.getByLabelText('Filter by stream'), 'stderr')
    expect(rows()).toEqual(['[rank 1] oops'])
    expect(screen.getByTestId('log-box').querySelector('.log-line')).toHaveClass('log-stderr', 'log-rank-1')
  })

  it('searches, counts the matches and steps from one to the next with Enter', async () => {
    const logs = many(5_000, (i) => (i % 1000 === 0 ? `checkpoint saved at ${i}` : `step ${i}`))
    render(<LogViewer jobId={5} logs={logs} olderBefore={null} />)
    const search = screen.getByLabelText('Search logs')
    await userEvent.type(search, 'CHECKPOINT')
    expect(screen.getByText('5 matches')).toBeInTheDocument()
    await userEvent.type(search, '{Enter}')
    scrolled()
    expect(screen.getByText('1 of 5')).toBeInTheDocument()
    const current = screen.getByTestId('log-box').querySelector('.log-current') as HTMLElement
    expect(current).toHaveTextContent('checkpoint saved at 1000')
    expect(within(current).getByText('checkpoint')).toContainHTML('mark')
    await userEvent.type(search, '{Shift>}{Enter}{/Shift}')
    scrolled()
    expect(screen.getByText('5 of 5')).toBeInTheDocument()
    expect(screen.getByTestId('log-box').querySelector('.log-current')).toHaveTextContent('checkpoint saved at 5000')
  })

  it('jumps to the first error, far above the tail', async () => {
    const logs = many(200_000, (i) => (i === 1234 ? 'RuntimeError: CUDA out of memory' : i === 150_000 ? 'ValueError: later' : `step ${i}`))
    render(<LogViewer jobId={5} logs={logs} olderBefore={null} />)
    scrolled()
    expect(rows()).not.toContain('[rank 2] RuntimeError: CUDA out of memory')
    await userEvent.click(screen.getByRole('button', { name: 'First error' }))
    scrolled()
    expect(screen.getByTestId('log-box').querySelector('.log-current')).toHaveTextContent('RuntimeError: CUDA out of memory')
    // Jumping stops following; Follow brings the tail back.
    await userEvent.click(screen.getByRole('button', { name: 'Follow ↓' }))
    scrolled()
    expect(rows().at(-1)).toBe('[rank 0] step 200000')
  })

  it('offers no error to jump to when there is none', () => {
    render(<LogViewer jobId={5} logs={many(10)} olderBefore={null} />)
    expect(screen.getByRole('button', { name: 'First error' })).toBeDisabled()
  })

  it('pages older lines from the API when scrolled to the top of a trimmed window', async () => {
    const window = Array.from({ length: 100 }, (_, i) => line(5_001 + i, `new ${i}`))
    const requests = mockFetch({
      'GET /api/jobs/5/logs': () => json({ events: [line(4_001, 'old 0'), line(4_002, 'old 1')], next_after: 4_002 }),
    })
    render(<LogViewer jobId={5} logs={window} olderBefore={5_001} />)
    expect(screen.getByTestId('log-count')).toHaveTextContent('100 lines (the latest; older ones load on scroll)')
    const box = screen.getByTestId('log-box')
    act(() => {
      box.scrollTop = 0
    })
    scrolled()
    await waitFor(() => expect(screen.getByTestId('log-count')).toHaveTextContent('102 lines'))
    expect(requests.map((r) => r.url.search)).toEqual(['?tail=1000&before=5001'])
    scrolled()
    expect(rows().slice(0, 3)).toEqual(['[rank 1] old 0', '[rank 2] old 1', '[rank 1] new 0'])
    // The line that was on top stays where the user was looking (two rows further down).
    expect(box.scrollTop).toBe(2 * LOG_ROW_PX)
    // A short page was the last: scrolling to the top again asks nothing more.
    act(() => {
      box.scrollTop = 0
    })
    scrolled()
    expect(requests).toHaveLength(1)
  })

  it("pages below a tail that reached further back for a quiet rank: every line once, in order", async () => {
    // Lines 1..300: rank 3 printed every 50th, rank 0 the rest. The tail holds rank 3's last two
    // (150, 200) and rank 0's lines from 251; older lines begin at 251.
    const printed = Array.from({ length: 300 }, (_, i) => line(i + 1, `l${i + 1}`, (i + 1) % 50 === 0 ? 3 : 0))
    const tail = printed.filter((e) => e.id >= 251 || (e.rank === 3 && e.id >= 150))
    const requests = mockFetch({
      'GET /api/jobs/5/logs': ({ url }) => {
        const before = Number(url.searchParams.get('before'))
        const count = Number(url.searchParams.get('tail'))
        const below = printed.filter((e) => e.id < before)
        return json({ events: below.slice(Math.max(0, below.length - count)), next_after: before })
      },
    })
    render(<LogViewer jobId={5} logs={tail} olderBefore={251} />)
    const box = screen.getByTestId('log-box')
    act(() => {
      box.scrollTop = 0
    })
    scrolled()
    await waitFor(() => expect(screen.getByTestId('log-count')).toHaveTextContent('300 lines'))
    expect(requests.map((r) => r.url.search)).toEqual(['?tail=1000&before=251'])
    act(() => {
      box.scrollTop = 0
    })
    scrolled()
    const ids = Array.from(box.querySelectorAll('[data-id]')).map((el) => Number(el.getAttribute('data-id')))
    expect(ids).toEqual(Array.from({ length: ids.length }, (_, i) => i + 1))
  })
})
