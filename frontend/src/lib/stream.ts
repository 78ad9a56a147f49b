import type { StreamRefusedCloseCode, StreamResumeCloseCode } from './types'

export type StreamStatus = 'connecting' | 'open' | 'closed'

export interface ReconnectingStreamOptions {
  /** Called before every (re)connect, so the URL can carry the latest resume cursor. */
  url: () => string
  onMessage: (message: unknown) => void
  onStatus?: (status: StreamStatus) => void
  /** Called on every successful (re)connect; a chance to refetch what was missed while down. */
  onOpen?: () => void
  /** The server closed with 4401 (not logged in) or 4404 (no such thing): retrying cannot help. */
  onRefused?: (code: number) => void
  minDelayMs?: number
  maxDelayMs?: number
}

/**
 * Application close codes of the server's streams that mean "do not retry": each of the schema's
 * StreamRefusedCloseCode, once (a code the server adds or drops fails to compile here).
 */
const REFUSED_CODES: Record<StreamRefusedCloseCode, true> = { 4401: true, 4404: true }
const REFUSED: ReadonlySet<number> = new Set(Object.keys(REFUSED_CODES).map(Number))

/**
 * The server dropped us because we fell behind (it held too much we had not read, or live events
 * meant for us were lost on the way): reconnect at once; `url()` carries the cursor, so the replay
 * resumes from the last event we have. Not a failure: no backoff.
 */
export const CLOSE_RESUME: StreamResumeCloseCode = 4429

/** A connection that stayed up this long counts as healthy: the next drop retries quickly. */
const HEALTHY_AFTER_MS = 5_000

/** ws(s)://<this host><path>: the dashboard only ever talks to its own origin. */
export function wsUrl(path: string): string {
  const scheme = window.location.protocol === 'https:' ? 'wss:' : 'ws:'
  return `${scheme}//${window.location.host}${path}`
}

/**
 * A WebSocket that reconnects with exponential backoff (min..max, doubling per failed try, reset
 * once a connection proves healthy). JSON messages only; anything else is dropped.
 */
export class ReconnectingStream {
  private readonly options: Required<Omit<ReconnectingStreamOptions, 'onStatus' | 'onOpen' | 'onRefused'>> &
    Pick<ReconnectingStreamOptions, 'onStatus' | 'onOpen' | 'onRefused'>
  private socket: WebSocket | null = null
  private timer: ReturnType<typeof setTimeout> | null = null
  private failures = 0
  private openedAt: number | null = null
  private stopped = true

  constructor(options: ReconnectingStreamOptions) {
    this.options = { minDelayMs: 500, maxDelayMs: 10_000, ...options }
  }

  start(): void {
    if (!this.stopped) return
    this.stopped = false
    this.connect()
  }

  stop(): void {
    this.stopped = true
    if (this.timer !== null) clearTimeout(this.timer)
    this.timer = null
    const socket = this.socket
    this.socket = null
    if (socket) {
      socket.onopen = socket.onmessage = socket.onclose = socket.onerror = null
      socket.close(1000)
    }
    this.options.onStatus?.('closed')
  }

  /** Delay before the next try: min * 2^failures, capped at max. */
  nextDelay(): number {
    const { minDelayMs, maxDelayMs } = this.options
    return Math.min(maxDelayMs, minDelayMs * 2 ** this.failures)
  }

  private connect(): void {
    this.timer = null
    this.openedAt = null
    this.options.onStatus?.('connecting')
    let socket: WebSocket
    try {
      socket = new WebSocket(this.options.url())
    } catch {
      this.scheduleReconnect()
      return
    }
    this.socket = socket
    socket.onopen = () => {
      this.openedAt = Date.now()
      this.options.onStatus?.('open')
      this.options.onOpen?.()
    }
    socket.onmessage = (event: MessageEvent) => {
      if (typeof event.data !== 'string') return
      let message: unknown
      try {
        message = JSON.parse(event.data)
      } catch {
        return
      }
      // A message means the server accepted us (not a reject-on-connect loop).
      this.failures = 0
      this.options.onMessage(message)
    }
    socket.onerror = () => {
      // Always followed by `close`, which does the work.
    }
    socket.onclose = (event: CloseEvent) => {
      if (this.socket !== socket) return
      this.socket = null
      if (REFUSED.has(event.code)) {
        this.stopped = true
        this.options.onStatus?.('closed')
        this.options.onRefused?.(event.code)
        return
      }
      if (this.openedAt !== null && Date.now() - this.openedAt >= HEALTHY_AFTER_MS) this.failures = 0
      this.options.onStatus?.('closed')
      if (event.code === CLOSE_RESUME && this.openedAt !== null) {
        this.timer = setTimeout(() => this.connect(), 0)
        return
      }
      this.scheduleReconnect()
    }
  }

  private scheduleReconnect(): void {
    if (this.stopped) return
    const delay = this.nextDelay()
    this.failures += 1
    this.timer = setTimeout(() => this.connect(), delay)
  }
}
