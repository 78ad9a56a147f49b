import createClient, { type Middleware } from 'openapi-fetch'
import type { paths } from './api-schema'
import type { ApiErrorBody } from './types'

/** Thrown for every non-2xx answer; `body` is the parsed JSON (DRF errors) when there is one. */
export class ApiError extends Error {
  readonly status: number
  readonly body: ApiErrorBody | null

  constructor(status: number, body: ApiErrorBody | null, message?: string) {
    super(message ?? (typeof body?.detail === 'string' ? body.detail : `HTTP ${status}`))
    this.name = 'ApiError'
    this.status = status
    this.body = body
  }

  /** DRF with session auth answers 403 (not 401) when nobody is logged in. */
  get isAuthError(): boolean {
    return this.status === 401 || this.status === 403
  }
}

export function isApiError(error: unknown): error is ApiError {
  return error instanceof ApiError
}

/** The request never got an answer: the server or the network between is down (fetch rejected). */
export class NetworkError extends Error {
  constructor(cause: unknown) {
    super(`could not reach the server (${cause instanceof Error ? cause.message : String(cause)})`, { cause })
    this.name = 'NetworkError'
  }
}

/**
 * Whether sending the same request again may succeed: no answer at all, a server error, a timeout
 * or a rate limit. A refusal (400, 403, 404, ...) would only be refused again: it is fixed in the
 * input, not by retrying.
 */
export function isRetryable(error: unknown): boolean {
  if (error instanceof NetworkError) return true
  return isApiError(error) && (error.status >= 500 || error.status === 408 || error.status === 429)
}

const CSRF_COOKIE = 'csrftoken'
const UNSAFE_METHODS = new Set(['POST', 'PUT', 'PATCH', 'DELETE'])

export function readCookie(name: string): string | null {
  for (const part of document.cookie.split(';')) {
    const [key, ...rest] = part.trim().split('=')
    if (key === name) return decodeURIComponent(rest.join('='))
  }
  return null
}

let csrfRequest: Promise<void> | null = null

/** Makes sure the `csrftoken` cookie exists (GET /api/auth/csrf sets it); one request at a time. */
export async function ensureCsrfCookie(force = false): Promise<string | null> {
  if (!force) {
    const existing = readCookie(CSRF_COOKIE)
    if (existing) return existing
  }
  csrfRequest ??= api
    .GET('/api/auth/csrf')
    .then(() => undefined)
    .finally(() => {
      csrfRequest = null
    })
  await csrfRequest
  return readCookie(CSRF_COOKIE)
}

async function parseBody(response: Response): Promise<unknown> {
  if (response.status === 204) return undefined
  const text = await response.text()
  if (!text) return undefined
  try {
    return JSON.parse(text)
  } catch {
    return text
  }
}

async function isCsrfFailure(response: Response): Promise<boolean> {
  if (response.status !== 403) return false
  const body = await parseBody(response.clone())
  return typeof body === 'object' && body !== null && 'detail' in body && typeof body.detail === 'string' && /csrf/i.test(body.detail)
}

async function throwUnlessOk(response: Response): Promise<Response> {
  if (response.ok) return response
  const body = await parseBody(response)
  const errorBody = typeof body === 'object' && body !== null ? (body as ApiErrorBody) : body ? { detail: String(body) } : null
  throw new ApiError(response.status, errorBody)
}

function withToken(request: Request, token: string | null): Request {
  if (!token) return request
  const headers = new Headers(request.headers)
  headers.set('X-CSRFToken', token)
  return new Request(request, { headers })
}

/**
 * The session's rules for every request to `/api`: the CSRF header on unsafe methods, one retry
 * with a fresh cookie when Django rejects the token (it rotates on login and logout), and an
 * ApiError for any answer that is not a 2xx.
 */
/** fetch, its rejections as a NetworkError; a cancelled request (a query no longer wanted) stays an AbortError. */
async function reach(send: (request: Request) => Promise<Response>, request: Request): Promise<Response> {
  try {
    return await send(request)
  } catch (error) {
    // A DOMException, which is not an Error in every environment: its name tells.
    if (typeof error === 'object' && error !== null && 'name' in error && error.name === 'AbortError') throw error
    throw new NetworkError(error)
  }
}

async function sendInSession(request: Request, fetchRequest: (request: Request) => Promise<Response>): Promise<Response> {
  const send = (request: Request) => reach(fetchRequest, request)
  if (!UNSAFE_METHODS.has(request.method)) return throwUnlessOk(await send(request))
  // The body can be read once: the retry sends a copy taken before the first try.
  const retry = request.clone()
  const response = await send(withToken(request, await ensureCsrfCookie()))
  if (!(await isCsrfFailure(response))) return throwUnlessOk(response)
  return throwUnlessOk(await send(withToken(retry, await ensureCsrfCookie(true))))
}

/**
 * openapi-fetch middleware for the session's rules (sendInSession). It sends the request itself,
 * since a CSRF retry is a second fetch; a non-2xx answer rejects the call with an ApiError, so
 * TanStack Query sees a failed query and a caller's `data` is always a success's.
 */
export const sessionMiddleware: Middleware = {
  onRequest: ({ request, options }) => sendInSession(request, options.fetch),
}

/**
 * The one way the dashboard talks to `/api`: `api.GET('/api/jobs/{job_id}', { params: { path:
 * { job_id } } })` and openapi-fetch's other methods, paths, parameters, bodies and answers typed
 * by the server's OpenAPI schema (api-schema.d.ts, `make api-types`). JSON in and out, the session
 * cookie, and sessionMiddleware's rules; `dataOf()` gives a call's answer.
 */
export const api = createClient<paths>({
  // Absolute, as `new Request()` needs outside a browser (the tests); always this page's origin.
  baseUrl: window.location.origin,
  credentials: 'same-origin',
  headers: { Accept: 'application/json' },
  // Looked up on every call rather than once here, so a test's stubbed fetch is the one used.
  fetch: (request) => globalThis.fetch(request),
})
api.use(sessionMiddleware)

/** The `data` of a call's success, as the schema types it; undefined where the route answers 204. */
export type SuccessData<Answer> = Answer extends { data: infer D; error?: never } ? ([D] extends [never] ? undefined : D) : never

/**
 * What a call of `api` answered on success. sessionMiddleware has thrown an ApiError for every
 * other answer, so `data` is the success's: openapi-fetch's types cannot know it, hence the one
 * assertion here.
 */
export async function dataOf<Answer extends { data?: unknown; error?: unknown; response: Response }>(
  call: Promise<Answer>,
): Promise<SuccessData<Answer>> {
  const answer = await call
  if (!answer.response.ok) throw new ApiError(answer.response.status, null)
  return answer.data as SuccessData<Answer>
}

/**
 * Flattens a DRF error body into `{"resources.nodes": ["msg"], ...}`. `detail` and
 * `non_field_errors` (at any depth) land under the empty key, the form-level errors.
 */
export function flattenFieldErrors(body: unknown, prefix = ''): Record<string, string[]> {
  const out: Record<string, string[]> = {}
  const add = (key: string, messages: string[]) => {
    if (messages.length) out[key] = [...(out[key] ?? []), ...messages]
  }
  const walk = (value: unknown, path: string) => {
    if (typeof value === 'string') {
      add(path, [value])
    } else if (Array.isArray(value)) {
      value.forEach((item, index) => {
        if (typeof item === 'string') add(path, [item])
        else walk(item, path ? `${path}.${index}` : String(index))
      })
    } else if (typeof value === 'object' && value !== null) {
      for (const [key, child] of Object.entries(value)) {
        const formLevel = key === 'detail' || key === 'non_field_errors'
        walk(child, formLevel ? path : path ? `${path}.${key}` : key)
      }
    }
  }
  walk(body, prefix)
  return out
}

/**
 * A failed call in words, for a message beside the control that made it: a 400's messages (without
 * their field names: the field is that control), otherwise the error's own message (a 403's detail).
 */
export function errorMessages(error: Error): string[] {
  if (isApiError(error) && error.status === 400 && error.body) {
    const messages = Object.values(flattenFieldErrors(error.body)).flat()
    if (messages.length) return messages
  }
  return [error.message]
}
