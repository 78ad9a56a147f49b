import { describe, expect, it } from 'vitest'
import { csrfRoute, json, mockFetch } from '../test/http'
import { ApiError, api, dataOf, flattenFieldErrors } from './api'

describe('api client', () => {
  it('fetches the CSRF cookie once, even for concurrent writes, and sends it as X-CSRFToken', async () => {
    const requests = mockFetch({
      ...csrfRoute('abc'),
      'POST /api/jobs/1/stop': () => json({}, 202),
      'DELETE /api/machines/3': () => new Response(null, { status: 204 }),
    })
    await Promise.all([
      api.POST('/api/jobs/{job_id}/stop', { params: { path: { job_id: 1 } } }),
      api.DELETE('/api/machines/{machine_id}', { params: { path: { machine_id: 3 } } }),
    ])
    expect(requests.filter((r) => r.path === '/api/auth/csrf')).toHaveLength(1)
    for (const r of requests.filter((r) => r.method !== 'GET')) {
      expect(r.headers.get('X-CSRFToken')).toBe('abc')
      expect(r.credentials).toBe('same-origin')
    }
  })

  it('retries a write once, body and all, with a fresh token when Django rejects the CSRF token', async () => {
    document.cookie = 'csrftoken=stale; path=/'
    const requests = mockFetch({
      ...csrfRoute('fresh'),
      'POST /api/auth/login': (r) =>
        r.headers.get('X-CSRFToken') === 'fresh'
          ? json({ username: 'ada' })
          : json({ detail: 'CSRF Failed: CSRF token incorrect.' }, 403),
    })
    const answer = await dataOf(api.POST('/api/auth/login', { body: { username: 'ada', password: 'pw' } }))
    expect(answer).toEqual({ username: 'ada' })
    expect(requests.map((r) => `${r.method} ${r.path} ${JSON.stringify(r.body ?? null)}`)).toEqual([
      'POST /api/auth/login {"username":"ada","password":"pw"}',
      'GET /api/auth/csrf null',
      'POST /api/auth/login {"username":"ada","password":"pw"}',
    ])
  })

  it('answers a 204 with undefined', async () => {
    mockFetch({ ...csrfRoute(), 'POST /api/auth/logout': () => new Response(null, { status: 204 }) })
    await expect(dataOf(api.POST('/api/auth/logout'))).resolves.toBeUndefined()
  })

  it('turns an error response into an ApiError carrying the DRF body', async () => {
    mockFetch({ 'GET /api/jobs/99': () => json({ detail: 'Not found.' }, 404) })
    const error = await api.GET('/api/jobs/{job_id}', { params: { path: { job_id: 99 } } }).catch((e: unknown) => e)
    expect(error).toBeInstanceOf(ApiError)
    expect(error).toMatchObject({ status: 404, message: 'Not found.', body: { detail: 'Not found.' } })
  })

  it('refuses a write the server rejects for another reason without retrying it', async () => {
    const requests = mockFetch({
      ...csrfRoute(),
      'POST /api/machines': () => json({ name: ["a machine named 'a' already exists."] }, 400),
    })
    const error = await dataOf(api.POST('/api/machines', { body: { name: 'a', host: 'h' } })).catch((e: unknown) => e)
    expect(error).toMatchObject({ status: 400, body: { name: ["a machine named 'a' already exists."] } })
    expect(requests.filter((r) => r.method === 'POST')).toHaveLength(1)
  })

  it('sends query parameters from the schema', async () => {
    const requests = mockFetch({ 'GET /api/jobs/5/logs': () => json({ events: [], next_after: 0 }) })
    await dataOf(api.GET('/api/jobs/{job_id}/logs', { params: { path: { job_id: 5 }, query: { tail: 10, before: 70 } } }))
    expect(requests[0].url.search).toBe('?tail=10&before=70')
  })

  it('flattens nested DRF errors into dotted paths', () => {
    expect(
      flattenFieldErrors({
        name: ['Required.'],
        resources: { nodes: ['Too many.'], non_field_errors: ['Bad resources.'] },
        args: { 1: ['Not a number.'] },
        non_field_errors: ['Nope.'],
        detail: 'Also nope.',
      }),
    ).toEqual({
      name: ['Required.'],
      'resources.nodes': ['Too many.'],
      resources: ['Bad resources.'],
      'args.1': ['Not a number.'],
      '': ['Nope.', 'Also nope.'],
    })
  })
})
