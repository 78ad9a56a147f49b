import { describe, expect, it } from 'vitest'
import { json, mockFetch } from '../test/http'
import { ApiError, NetworkError, api, isRetryable } from './api'

describe('a request that gets no answer', () => {
  it('fails with a NetworkError that says so and may be retried', async () => {
    mockFetch({
      'GET /api/jobs': () => {
        throw new TypeError('Failed to fetch')
      },
    })
    const error = await api.GET('/api/jobs').catch((e: unknown) => e)
    expect(error).toBeInstanceOf(NetworkError)
    expect(error).toMatchObject({ message: 'could not reach the server (Failed to fetch)' })
    expect(isRetryable(error)).toBe(true)
  })

  it('stays an AbortError when the caller cancelled it (a query no longer wanted)', async () => {
    mockFetch({
      'GET /api/jobs': () => {
        throw new DOMException('The operation was aborted.', 'AbortError')
      },
    })
    const error = await api.GET('/api/jobs').catch((e: unknown) => e)
    expect(error).not.toBeInstanceOf(NetworkError)
    expect(error).toMatchObject({ name: 'AbortError' })
  })
})

describe('which failures Retry is offered for', () => {
  it('server errors, timeouts and rate limits; never a refusal or a bug', async () => {
    for (const status of [500, 502, 503, 504, 408, 429]) expect(isRetryable(new ApiError(status, null))).toBe(true)
    for (const status of [400, 401, 403, 404, 409]) expect(isRetryable(new ApiError(status, null))).toBe(false)
    expect(isRetryable(new Error('a bug'))).toBe(false)
    mockFetch({ 'GET /api/jobs': () => json({ detail: 'Service unavailable.' }, 503) })
    expect(isRetryable(await api.GET('/api/jobs').catch((e: unknown) => e))).toBe(true)
  })
})
