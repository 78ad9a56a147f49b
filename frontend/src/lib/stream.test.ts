import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest'
import { FakeWebSocket } from '../test/fake-websocket'
import { CLOSE_RESUME, ReconnectingStream } from './stream'

describe('ReconnectingStream', () => {
  beforeEach(() => {
    vi.useFakeTimers()
    vi.stubGlobal('WebSocket', FakeWebSocket)
  })
  afterEach(() => {
    vi.useRealTimers()
  })

  it('backs off exponentially from 0.5 s to 10 s and asks for a fresh URL each time', () => {
    let cursor = 0
    const stream = new ReconnectingStream({ url: () => `ws://x/s?after=${cursor}`, onMessage: () => {} })
    stream.start()
    const waits: number[] = []
    for (let attempt = 0; attempt < 7; attempt++) {
      const count = FakeWebSocket.instances.length
      FakeWebSocket.latest().drop()
      cursor += 10
      let waited = 0
      while (FakeWebSocket.instances.length === count) {
        vi.advanceTimersByTime(100)
        waited += 100
      }
      waits.push(waited)
    }
    expect(waits).toEqual([500, 1000, 2000, 4000, 8000, 10000, 10000])
    expect(FakeWebSocket.latest().url).toBe('ws://x/s?after=70')
    stream.stop()
  })

  it('starts again from the minimum once a connection delivers, and stops for good on stop()', () => {
    const messages: unknown[] = []
    const stream = new ReconnectingStream({ url: () => 'ws://x/s', onMessage: (m) => messages.push(m) })
    stream.start()
    FakeWebSocket.latest().drop()
    vi.advanceTimersByTime(500)
    FakeWebSocket.latest().drop()
    vi.advanceTimersByTime(1000)
    const socket = FakeWebSocket.latest()
    socket.open()
    socket.receive({ type: 'events', events: [] })
    expect(messages).toHaveLength(1)
    expect(messages[0]).toEqual({ type: 'events', events: [] })
    socket.drop()
    expect(FakeWebSocket.instances).toHaveLength(3)
    vi.advanceTimersByTime(500)
    expect(FakeWebSocket.instances).toHaveLength(4)

    stream.stop()
    expect(FakeWebSocket.latest().closedByClient).toBe(true)
    vi.advanceTimersByTime(60_000)
    expect(FakeWebSocket.instances).toHaveLength(4)
  })

  it('resumes at once from a fresh cursor when the server says it fell behind', () => {
    let cursor = 0
    const stream = new ReconnectingStream({ url: () => `ws://x/s?after=${cursor}`, onMessage: () => {} })
    stream.start()
    // Two failed tries first: a resume must not wait out their backoff.
    FakeWebSocket.latest().drop()
    vi.advanceTimersByTime(500)
    FakeWebSocket.latest().drop()
    vi.advanceTimersByTime(1000)
    const socket = FakeWebSocket.latest()
    socket.open()
    cursor = 1234
    socket.refuse(CLOSE_RESUME)
    vi.advanceTimersByTime(0)
    expect(FakeWebSocket.instances).toHaveLength(4)
    expect(FakeWebSocket.latest().url).toBe('ws://x/s?after=1234')
    stream.stop()
  })

  it('stops retrying when the server refuses the stream and says why', () => {
    const refused: number[] = []
    const stream = new ReconnectingStream({ url: () => 'ws://x/s', onMessage: () => {}, onRefused: (c) => refused.push(c) })
    stream.start()
    const socket = FakeWebSocket.latest()
    socket.open()
    socket.refuse(4401)
    expect(refused).toEqual([4401])
    vi.advanceTimersByTime(60_000)
    expect(FakeWebSocket.instances).toHaveLength(1)
  })
})
