import { describe, expect, it } from 'vitest'
import { csrfRoute, json, mockFetch } from '../test/http'
import { ApiError, apiRequest, flattenFieldErrors } from './api'

describe('api client', () => {
  it('fetches the CSRF cookie once, even for concurrent writes, and sends it as X-CSRFToken', async () => {
    const requests = mockFetch({
      ...csrfRoute('abc'),
      'POST /api/jobs/1/stop': () => json({}, 202),
      'DELETE /api/machines/3': () => new Response(null, { status: 204 }),
    })
    await Promise.all([
      apiRequest('/api/jobs/1/stop', { method: 'POST' }),
      apiRequest('/api/machines/3', { method: 'DELETE' }),
    ])
    expect(requests.filter((r) => r.path === '/api/auth/csrf')).toHaveLength(1)
    for (const r of requests.filter((r) => r.method !== 'GET')) expect(r.headers.get('X-CSRFToken')).toBe('abc')
  })

  it('retries a write once with a fresh token when Django rejects the CSRF token', async () => {
    document.cookie = 'csrftoken=stale; path=/'
    let attempts = 0
    const requests = mockFetch({
      ...csrfRoute('fresh'),
      'POST /api/auth/logout': (r) => {
        attempts += 1
        return r.headers.get('X-CSRFToken') === 'fresh'
          ? new Response(null, { status: 204 })
          : json({ detail: 'CSRF Failed: CSRF token incorrect.' }, 403)
      },
    })
    await expect(apiRequest('/api/auth/logout', { method: 'POST' })).resolves.toBeUndefined()
    expect(attempts).toBe(2)
    expect(requests.map((r) => `${r.method} ${r.path}`)).toEqual([
      'POST /api/auth/logout',
      'GET /api/auth/csrf',
      'POST /api/auth/logout',
    ])
  })

  it('turns an error response into an ApiError carrying the DRF body', async () => {
    mockFetch({ 'GET /api/jobs/99': () => json({ detail: 'Not found.' }, 404) })
    const error = await apiRequest('/api/jobs/99').catch((e: unknown) => e)
    expect(error).toBeInstanceOf(ApiError)
    expect(error).toMatchObject({ status: 404, message: 'Not found.', body: { detail: 'Not found.' } })
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
