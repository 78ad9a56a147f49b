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
  csrfRequest ??= fetch('/api/auth/csrf', { credentials: 'same-origin' })
    .then(() => undefined)
    .finally(() => {
      csrfRequest = null
    })
  await csrfRequest
  return readCookie(CSRF_COOKIE)
}

export interface RequestOptions {
  method?: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE'
  body?: unknown
  signal?: AbortSignal
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

function isCsrfFailure(status: number, body: unknown): boolean {
  return (
    status === 403 &&
    typeof body === 'object' &&
    body !== null &&
    typeof (body as ApiErrorBody).detail === 'string' &&
    /csrf/i.test((body as ApiErrorBody).detail as string)
  )
}

async function send(path: string, options: RequestOptions, csrfToken: string | null): Promise<Response> {
  const method = options.method ?? 'GET'
  const headers: Record<string, string> = { Accept: 'application/json' }
  if (options.body !== undefined) headers['Content-Type'] = 'application/json'
  if (csrfToken) headers['X-CSRFToken'] = csrfToken
  return fetch(path, {
    method,
    headers,
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
    credentials: 'same-origin',
    signal: options.signal,
  })
}

/**
 * The one way the dashboard talks to `/api`: JSON in and out, session cookie, CSRF header on
 * unsafe methods. A CSRF rejection (stale token after login/logout rotation) is retried once with
 * a fresh cookie.
 */
export async function apiRequest<T>(path: string, options: RequestOptions = {}): Promise<T> {
  const unsafe = UNSAFE_METHODS.has(options.method ?? 'GET')
  let token = unsafe ? await ensureCsrfCookie() : null
  let response = await send(path, options, token)
  let body = await parseBody(response)
  if (unsafe && isCsrfFailure(response.status, body)) {
    token = await ensureCsrfCookie(true)
    response = await send(path, options, token)
    body = await parseBody(response)
  }
  if (!response.ok) {
    const errorBody =
      typeof body === 'object' && body !== null ? (body as ApiErrorBody) : body ? { detail: String(body) } : null
    throw new ApiError(response.status, errorBody)
  }
  return body as T
}

export const api = {
  get: <T>(path: string, signal?: AbortSignal) => apiRequest<T>(path, { signal }),
  post: <T>(path: string, body?: unknown) => apiRequest<T>(path, { method: 'POST', body }),
  patch: <T>(path: string, body?: unknown) => apiRequest<T>(path, { method: 'PATCH', body }),
  delete: <T = void>(path: string) => apiRequest<T>(path, { method: 'DELETE' }),
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
