import { describe, expect, it } from 'vitest'
import type { Plugin } from './api/get-plugins'
import { buildSpec, defaultPlugin, formErrors, initialFormState, parseConfig, withPlugin } from './new-job-spec'

const plugin = (overrides: Partial<Plugin>): Plugin => ({
  name: 'p',
  version: '1',
  description: '',
  entrypoint: 'main.py',
  default_config: {},
  builtin: false,
  bundle: 'cd'.repeat(32),
  created_at: null,
  project: 'default',
  ...overrides,
})

describe('the New job form as a JobSpec', () => {
  it('is one node without distributed training, whatever machine count the toggle would bring back', () => {
    const form = { ...initialFormState(), name: ' one ', nodes: '4', procs_per_node: '3', selection: 'manual' as const, machines: ['a', 'b'] }
    expect(buildSpec(form, null)).toMatchObject({
      name: 'one',
      resources: { nodes: 1, procs_per_node: 3 },
      placement: { machines: [] },
    })
    expect(buildSpec({ ...form, machine: 'b' }, null).placement).toEqual({ policy: 'pack', machines: ['b'] })
  })

  it('restarts every rank by default and replaces a dead rank alone when asked (fault_tolerance.mode)', () => {
    const form = { ...initialFormState(), max_restarts: '2' }
    expect(buildSpec(form, null).fault_tolerance).toEqual({ max_restarts: 2 })
    expect(buildSpec({ ...form, recovery: 'in_place' }, null).fault_tolerance).toEqual({ max_restarts: 2, mode: 'in_place' })
  })

  it('spans the machine count with distributed training, on the manual pick when there is one', () => {
    const form = { ...initialFormState(), distributed: true, nodes: '4', machine: 'ignored', machines: ['a', 'b'] }
    expect(buildSpec(form, null)).toMatchObject({ resources: { nodes: 4 }, placement: { machines: [] } })
    expect(buildSpec({ ...form, selection: 'manual' }, null).placement).toEqual({ policy: 'pack', machines: ['a', 'b'] })
  })

  it('gives a built-in recipe --steps and an uploaded plugin its code and only the extra arguments', () => {
    const form = { ...initialFormState(), steps: '50', args: ['--fp16', ''] }
    expect(buildSpec(form, 'lab')).toMatchObject({ project: 'lab', args: ['--steps', '50', '--fp16'] })
    expect(buildSpec(form, null)).not.toHaveProperty('code')
    const withCode = withPlugin(form, plugin({ bundle: 'ef'.repeat(32) }))
    expect(buildSpec(withCode, null)).toMatchObject({
      entrypoint: 'main.py',
      code: { bundle: 'ef'.repeat(32) },
      // Through the plugin harness under accelerate, as TransformerLab's routes run a plugin.
      distributed: { launcher: 'accelerate' },
      args: ['--fp16'],
    })
    expect(buildSpec(form, null)).not.toHaveProperty('distributed')
  })

  it('sends the config with batch size and learning rate over it, and the scaling only with hyperparameters', () => {
    const form = { ...initialFormState(), config: '{"epochs": 2, "batch_size": 8}', batch_size: '16' }
    expect(buildSpec(form, null)).toMatchObject({
      hyperparameters: { epochs: 2, batch_size: 16 },
      scaling: { mode: 'keep_global_batch' },
    })
    const bare = buildSpec(initialFormState(), null)
    expect(bare).not.toHaveProperty('hyperparameters')
    expect(bare).not.toHaveProperty('scaling')
  })
})

describe('a plugin in the form', () => {
  it('puts batch size and learning rate in their fields and the rest of its config in the JSON', () => {
    const form = withPlugin(
      { ...initialFormState(), name: 'kept', batch_size: '99' },
      plugin({ name: 'llama', default_config: { batch_size: 4, lr: 0.1, epochs: 1, warmup: 'linear' } }),
    )
    expect(form).toMatchObject({ name: 'kept', plugin: 'llama', entrypoint: 'main.py', batch_size: '4', lr: '0.1' })
    expect(JSON.parse(form.config)).toEqual({ epochs: 1, warmup: 'linear' })
  })

  it('leaves a non-numeric batch size in the config and clears what the previous plugin set', () => {
    const form = withPlugin({ ...initialFormState(), lr: '0.5', config: '{"x": 1}' }, plugin({ default_config: { batch_size: 'auto' } }))
    expect(form).toMatchObject({ batch_size: '', lr: '' })
    expect(JSON.parse(form.config)).toEqual({ batch_size: 'auto' })
    expect(withPlugin(form, plugin({ default_config: {} })).config).toBe('')
  })

  it('starts from the built-in default recipe when listed, else the first plugin', () => {
    const recipe = plugin({ name: 'mlp_ddp', entrypoint: 'examples/mlp_ddp.py', bundle: null, builtin: true })
    expect(defaultPlugin([plugin({ name: 'first' }), recipe])?.name).toBe('mlp_ddp')
    expect(defaultPlugin([plugin({ name: 'first' })])?.name).toBe('first')
    expect(defaultPlugin([])).toBeUndefined()
  })
})

describe('the config text', () => {
  it('is an object or says what is wrong', () => {
    expect(parseConfig('  ')).toEqual({ config: {} })
    expect(parseConfig('{"a": [1]}')).toEqual({ config: { a: [1] } })
    expect(parseConfig('[1]')).toEqual({ error: 'a JSON object, {"key": value, ...}.' })
    expect(parseConfig('null')).toHaveProperty('error')
    expect(parseConfig('{a: 1}')).toMatchObject({ error: expect.stringMatching(/^not valid JSON/) })
    expect(formErrors({ ...initialFormState(), config: '{' })).toHaveProperty('config')
    expect(formErrors(initialFormState())).toEqual({})
  })
})
