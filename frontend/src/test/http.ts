import { vi } from 'vitest'

export interface RecordedRequest {
  method: string
  path: string
  url: URL
  headers: Headers
  body: unknown
  credentials: RequestCredentials | undefined
}

type Handler = (request: RecordedRequest) => Response | Promise<Response>

export function json(body: unknown, status = 200): Response {
  return new Response(body === undefined ? null : JSON.stringify(body), {
    status,
    headers: { 'Content-Type': 'application/json' },
  })
}

/**
 * Replaces `fetch` with a table of "METHOD /path" -> handler (the query string is not part of the
 * key). Anything not in the table fails the request loudly, so a test never leans on an
 * unplanned call. Returns the list of requests made, in order.
 */
export function mockFetch(routes: Record<string, Handler>): RecordedRequest[] {
  const requests: RecordedRequest[] = []
  const fetchMock = vi.fn(async (input: RequestInfo | URL, init?: RequestInit) => {
    // The API client hands fetch a Request; read it as the server would.
    const sent = new Request(input instanceof Request ? input : new URL(String(input), window.location.origin), init)
    const url = new URL(sent.url)
    const method = sent.method.toUpperCase()
    const text = await sent.text()
    const request: RecordedRequest = {
      method,
      path: url.pathname,
      url,
      headers: sent.headers,
      body: text ? JSON.parse(text) : undefined,
      credentials: sent.credentials,
    }
    requests.push(request)
    const handler = routes[`${method} ${url.pathname}`]
    if (!handler) throw new Error(`unexpected request ${method} ${url.pathname}`)
    return handler(request)
  })
  vi.stubGlobal('fetch', fetchMock)
  return requests
}

/** GET /api/auth/csrf as the browser sees it: the response sets the `csrftoken` cookie. */
export function csrfRoute(token = 'test-csrf-token'): Record<string, Handler> {
  return {
    'GET /api/auth/csrf': () => {
      document.cookie = `csrftoken=${token}; path=/`
      return json({ detail: 'CSRF cookie set' })
    },
  }
}
