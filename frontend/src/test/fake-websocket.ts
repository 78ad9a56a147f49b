/**
 * The browser's WebSocket, faked: tests play the server by calling `open()`, `receive()` and
 * `drop()` on the instance the code under test created.
 */
export class FakeWebSocket {
  static readonly CONNECTING = 0
  static readonly OPEN = 1
  static readonly CLOSING = 2
  static readonly CLOSED = 3
  static instances: FakeWebSocket[] = []

  readonly url: string
  readyState = FakeWebSocket.CONNECTING
  closedByClient = false
  onopen: ((event: Event) => void) | null = null
  onmessage: ((event: MessageEvent) => void) | null = null
  onclose: ((event: CloseEvent) => void) | null = null
  onerror: ((event: Event) => void) | null = null

  constructor(url: string | URL) {
    this.url = String(url)
    FakeWebSocket.instances.push(this)
  }

  static reset(): void {
    FakeWebSocket.instances = []
  }

  static latest(): FakeWebSocket {
    const socket = FakeWebSocket.instances.at(-1)
    if (!socket) throw new Error('no WebSocket was opened')
    return socket
  }

  /** Path and query of the URL the client connected to, e.g. "/api/jobs/5/stream?after=0". */
  get target(): string {
    const url = new URL(this.url)
    return `${url.pathname}${url.search}`
  }

  send(): void {}

  close(): void {
    this.closedByClient = true
    this.finish(1000)
  }

  // Server side, driven by the test.
  open(): void {
    this.readyState = FakeWebSocket.OPEN
    this.onopen?.(new Event('open'))
  }

  receive(message: unknown): void {
    if (this.readyState !== FakeWebSocket.OPEN) throw new Error('receive() on a socket that is not open')
    this.onmessage?.(new MessageEvent('message', { data: JSON.stringify(message) }))
  }

  /** The connection goes away (server restart, network): abnormal closure. */
  drop(): void {
    this.onerror?.(new Event('error'))
    this.finish(1006)
  }

  /** The server closes with an application code (4401: not logged in, 4404: not found). */
  refuse(code: number): void {
    this.finish(code)
  }

  private finish(code: number): void {
    if (this.readyState === FakeWebSocket.CLOSED) return
    this.readyState = FakeWebSocket.CLOSED
    this.onclose?.(new CloseEvent('close', { code }))
  }
}
