import type { Machine } from '../../lib/types'
import type { JobSpecInput } from './api/create-job'
import type { DistributedPreferences, DistributedPreferencesInput } from './api/distributed-preferences'

export interface EnvRow {
  key: string
  value: string
}

/** Everything the New job form holds, as typed (numbers stay strings until the spec is built). */
export interface NewJobFormState {
  name: string
  project: string
  entrypoint: string
  steps: string
  nodes: string
  procs_per_node: string
  gpus_per_node: string
  /** GB: what people read on a GPU's box; the spec counts MB. */
  min_gpu_memory_gb: string
  max_restarts: string
  selection: 'auto' | 'manual'
  /** Machine names in the order picked: the first is the master. */
  machines: string[]
  /** The built-in placement policies (a site's own are given by name in a JobSpec). */
  policy: 'pack' | 'spread' | 'simple' | 'balanced'
  batch_size: string
  lr: string
  scaling: 'keep_global_batch' | 'scale_global_batch' | 'none'
  args: string[]
  env: EnvRow[]
}

export const DEFAULT_ENTRYPOINT = 'examples/mlp_ddp.py'

export const initialFormState = (): NewJobFormState => ({
  name: '',
  project: '',
  entrypoint: DEFAULT_ENTRYPOINT,
  steps: '500',
  nodes: '2',
  procs_per_node: '1',
  gpus_per_node: '0',
  min_gpu_memory_gb: '0',
  max_restarts: '3',
  selection: 'auto',
  machines: [],
  policy: 'pack',
  batch_size: '',
  lr: '',
  scaling: 'keep_global_batch',
  args: [],
  env: [],
})

/**
 * The JobSpec the form stands for. `project` only when the user has a choice; hyperparameters only
 * when given, so a recipe's own defaults apply otherwise.
 */
export function buildSpec(form: NewJobFormState, project: string | null): JobSpecInput {
  const hyperparameters: Record<string, number> = {}
  if (form.batch_size.trim()) hyperparameters.batch_size = Number(form.batch_size)
  if (form.lr.trim()) hyperparameters.lr = Number(form.lr)
  const env = form.env.filter((row) => row.key.trim())
  return {
    name: form.name.trim(),
    entrypoint: form.entrypoint,
    ...(project ? { project } : {}),
    args: ['--steps', form.steps.trim(), ...form.args.filter((arg) => arg !== '')],
    ...(env.length ? { env: Object.fromEntries(env.map((row) => [row.key.trim(), row.value])) } : {}),
    resources: {
      nodes: Number(form.nodes),
      procs_per_node: Number(form.procs_per_node),
      gpus_per_node: Number(form.gpus_per_node),
      min_gpu_memory: Math.round(Number(form.min_gpu_memory_gb) * 1024),
    },
    placement: { policy: form.policy, machines: form.selection === 'manual' ? form.machines : [] },
    ...(Object.keys(hyperparameters).length ? { hyperparameters, scaling: { mode: form.scaling } } : {}),
    fault_tolerance: { max_restarts: Number(form.max_restarts) },
  }
}

/** Machines a job could be placed on now: reporting, not draining. */
export const isPlaceable = (machine: Machine) => machine.status === 'online' || machine.status === 'busy'

/** GPUs no live job holds (the usage counts every project's). */
export function freeGpus(machine: Machine): number {
  const total = machine.capabilities.gpu_count ?? machine.capabilities.gpus?.length ?? 0
  const held = machine.usage.reduce((sum, use) => sum + use.gpus, 0)
  return Math.max(0, total - held)
}

/** The form with the user's saved distributed defaults in place (seed 000's DistributedPreferences). */
export function withPreferences(form: NewJobFormState, preferences: DistributedPreferences): NewJobFormState {
  return {
    ...form,
    nodes: String(preferences.default_num_machines),
    procs_per_node: String(preferences.default_procs_per_machine),
    gpus_per_node: String(preferences.default_gpus_per_machine),
    selection: preferences.auto_machine_selection ? 'auto' : 'manual',
    machines: preferences.preferred_machine_names,
  }
}

/**
 * The form's distributed settings as the defaults to save. The picked machines go by id, in their
 * order (the first would be the master), kept even under automatic selection, for the next manual
 * pick; a name no longer in the cluster is left out. Numbers go as typed: the server says which is
 * out of range.
 */
export function preferencesOf(form: NewJobFormState, machines: Machine[]): DistributedPreferencesInput {
  const ids = new Map(machines.map((m) => [m.name, m.id]))
  return {
    preferred_machines: form.machines.flatMap((name) => (ids.has(name) ? [ids.get(name)!] : [])),
    default_num_machines: Number(form.nodes),
    default_procs_per_machine: Number(form.procs_per_node),
    default_gpus_per_machine: Number(form.gpus_per_node),
    auto_machine_selection: form.selection === 'auto',
  }
}
