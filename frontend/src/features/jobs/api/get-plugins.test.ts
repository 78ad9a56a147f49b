import { describe, expect, it } from 'vitest'
import { ApiError } from '../../../lib/api'
import { json, mockFetch } from '../../../test/http'
import { getPlugins, type Plugin } from './get-plugins'

const uploaded: Plugin = {
  name: 'llama_trainer',
  version: '0.3.1',
  description: 'Fine-tunes a llama.',
  entrypoint: 'main.py',
  default_config: { epochs: 3 },
  builtin: false,
  bundle: 'ab'.repeat(32),
  created_at: '2026-11-01T10:00:00Z',
  project: 'default',
}

describe('the plugins a job may run', () => {
  it('are what GET /api/plugins answers', async () => {
    const requests = mockFetch({ 'GET /api/plugins': () => json([uploaded]) })
    expect(await getPlugins()).toEqual([uploaded])
    expect(requests.map((r) => r.path)).toEqual(['/api/plugins'])
  })

  it('fail with the API error', async () => {
    const requests = mockFetch({ 'GET /api/plugins': () => json({ detail: 'boom' }, 500) })
    await expect(getPlugins()).rejects.toBeInstanceOf(ApiError)
    expect(requests.map((r) => r.path)).toEqual(['/api/plugins'])
  })
})
