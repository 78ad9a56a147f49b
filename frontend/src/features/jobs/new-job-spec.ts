import type { Machine } from '../../lib/types'
import type { JobSpecInput } from './api/create-job'
import type { DistributedPreferences, DistributedPreferencesInput } from './api/distributed-preferences'
import type { Plugin } from './api/get-plugins'

export interface EnvRow {
  key: string
  value: string
}

/** Everything the New job form holds, as typed (numbers stay strings until the spec is built). */
export interface NewJobFormState {
  name: string
  project: string
  /** The plugin picked, by name; '' until the list arrives (the default recipe meanwhile). */
  plugin: string
  entrypoint: string
  /** The picked plugin's bundle (its code); null for a built-in recipe. */
  bundle: string | null
  /** The plugin's config beyond batch size and learning rate, as JSON text (an object). */
  config: string
  /** `--steps N`, which the built-in recipes take; a plugin with a bundle reads its config instead. */
  steps: string
  /** TransformerLab's "Distributed training" toggle: off, the job runs on one machine. */
  distributed: boolean
  /** Off: the one machine picked by name (TransformerLab's remote job dispatch), '' for any. */
  machine: string
  nodes: string
  procs_per_node: string
  gpus_per_node: string
  /** GB: what people read on a GPU's box; the spec counts MB. */
  min_gpu_memory_gb: string
  max_restarts: string
  /** fault_tolerance.mode: restart every rank from the last checkpoint, or replace the dead one alone. */
  recovery: 'restart' | 'in_place'
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

type Launcher = NonNullable<NonNullable<JobSpecInput['distributed']>['launcher']>

/**
 * How an uploaded plugin runs: `accelerate launch` on each node, its entrypoint through the plugin
 * harness (an `accelerator` in its __main__), as TransformerLab's routes run it (plugins/services.py).
 */
export const PLUGIN_LAUNCHER: Launcher = 'accelerate'

export const initialFormState = (): NewJobFormState => ({
  name: '',
  project: '',
  plugin: '',
  entrypoint: DEFAULT_ENTRYPOINT,
  bundle: null,
  config: '',
  steps: '500',
  distributed: false,
  machine: '',
  nodes: '2',
  procs_per_node: '1',
  gpus_per_node: '0',
  min_gpu_memory_gb: '0',
  max_restarts: '3',
  recovery: 'restart',
  selection: 'auto',
  machines: [],
  policy: 'pack',
  batch_size: '',
  lr: '',
  scaling: 'keep_global_batch',
  args: [],
  env: [],
})

/** Whether the job runs a built-in recipe (which takes `--steps N`) rather than an uploaded plugin's code. */
export const runsBuiltinRecipe = (form: NewJobFormState) => form.bundle === null

/** The config text as an object, or what is wrong with it. Empty text is an empty config. */
export function parseConfig(text: string): { config: Record<string, unknown> } | { error: string } {
  if (!text.trim()) return { config: {} }
  let value: unknown
  try {
    value = JSON.parse(text)
  } catch (error) {
    return { error: `not valid JSON (${(error as Error).message}).` }
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return { error: 'a JSON object, {"key": value, ...}.' }
  return { config: value as Record<string, unknown> }
}

/** The form's own problems, before anything is sent: field -> messages. */
export function formErrors(form: NewJobFormState): Record<string, string[]> {
  const parsed = parseConfig(form.config)
  return 'error' in parsed ? { config: [parsed.error] } : {}
}

/** The machines the job is pinned to: the one picked without distributed training, the manual pick with it. */
export function pinnedMachines(form: NewJobFormState): string[] {
  if (!form.distributed) return form.machine ? [form.machine] : []
  return form.selection === 'manual' ? form.machines : []
}

/**
 * The JobSpec the form stands for. `project` only when the user has a choice; hyperparameters only
 * when given, so a recipe's own defaults apply otherwise. Without distributed training the job is
 * the same spec on one machine.
 */
export function buildSpec(form: NewJobFormState, project: string | null): JobSpecInput {
  const parsed = parseConfig(form.config)
  const hyperparameters: Record<string, unknown> = 'config' in parsed ? { ...parsed.config } : {}
  if (form.batch_size.trim()) hyperparameters.batch_size = Number(form.batch_size)
  if (form.lr.trim()) hyperparameters.lr = Number(form.lr)
  const env = form.env.filter((row) => row.key.trim())
  const extraArgs = form.args.filter((arg) => arg !== '')
  return {
    name: form.name.trim(),
    entrypoint: form.entrypoint,
    ...(form.bundle ? { code: { bundle: form.bundle }, distributed: { launcher: PLUGIN_LAUNCHER } } : {}),
    ...(project ? { project } : {}),
    args: runsBuiltinRecipe(form) ? ['--steps', form.steps.trim(), ...extraArgs] : extraArgs,
    ...(env.length ? { env: Object.fromEntries(env.map((row) => [row.key.trim(), row.value])) } : {}),
    resources: {
      nodes: form.distributed ? Number(form.nodes) : 1,
      procs_per_node: Number(form.procs_per_node),
      gpus_per_node: Number(form.gpus_per_node),
      min_gpu_memory: Math.round(Number(form.min_gpu_memory_gb) * 1024),
    },
    placement: { policy: form.policy, machines: pinnedMachines(form) },
    ...(Object.keys(hyperparameters).length ? { hyperparameters, scaling: { mode: form.scaling } } : {}),
    fault_tolerance: {
      max_restarts: Number(form.max_restarts),
      ...(form.recovery === 'in_place' ? { mode: 'in_place' as const } : {}),
    },
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

/**
 * The form with the user's saved distributed defaults in place (TransformerLab's DistributedPreferences):
 * more than one machine turns distributed training on; one machine, picked by hand, is the
 * single-machine choice.
 */
export function withPreferences(form: NewJobFormState, preferences: DistributedPreferences): NewJobFormState {
  const distributed = preferences.default_num_machines > 1
  const names = preferences.preferred_machine_names
  return {
    ...form,
    distributed,
    // Off, the machine count the toggle would bring back stays the built-in one.
    nodes: distributed ? String(preferences.default_num_machines) : form.nodes,
    procs_per_node: String(preferences.default_procs_per_machine),
    gpus_per_node: String(preferences.default_gpus_per_machine),
    selection: preferences.auto_machine_selection ? 'auto' : 'manual',
    machines: names,
    machine: !distributed && !preferences.auto_machine_selection ? (names[0] ?? '') : '',
  }
}

/** The machine names "Save as my defaults" keeps: the single machine when one is picked, else the manual pick. */
export const preferredNamesOf = (form: NewJobFormState): string[] =>
  !form.distributed && form.machine ? [form.machine] : form.machines

/**
 * The form's distributed settings as the defaults to save. The picked machines go by id, in their
 * order (the first would be the master), kept even under automatic selection, for the next manual
 * pick; a name no longer in the cluster is left out. Numbers go as typed: the server says which is
 * out of range. Without distributed training the default is one machine: the picked one, or any.
 */
export function preferencesOf(form: NewJobFormState, machines: Machine[]): DistributedPreferencesInput {
  const ids = new Map(machines.map((m) => [m.name, m.id]))
  return {
    preferred_machines: preferredNamesOf(form).flatMap((name) => (ids.has(name) ? [ids.get(name)!] : [])),
    default_num_machines: form.distributed ? Number(form.nodes) : 1,
    default_procs_per_machine: Number(form.procs_per_node),
    default_gpus_per_machine: Number(form.gpus_per_node),
    auto_machine_selection: form.distributed ? form.selection === 'auto' : !form.machine,
  }
}

/** Batch size and learning rate have fields of their own; the rest of a plugin's config is JSON. */
const OWN_FIELDS = ['batch_size', 'lr'] as const

/**
 * The form running `plugin`: its entrypoint and code, and its default config in the fields (batch
 * size, learning rate) and the config text (everything else).
 */
export function withPlugin(form: NewJobFormState, plugin: Plugin): NewJobFormState {
  const rest = { ...plugin.default_config }
  const own: Record<(typeof OWN_FIELDS)[number], string> = { batch_size: '', lr: '' }
  for (const key of OWN_FIELDS) {
    if (typeof rest[key] === 'number') {
      own[key] = String(rest[key])
      delete rest[key]
    }
  }
  return {
    ...form,
    plugin: plugin.name,
    entrypoint: plugin.entrypoint,
    bundle: plugin.bundle,
    config: Object.keys(rest).length ? JSON.stringify(rest, null, 2) : '',
    ...own,
  }
}

/** The plugin the form starts with: the built-in default recipe if listed, else the first. */
export const defaultPlugin = (plugins: Plugin[]): Plugin | undefined =>
  plugins.find((p) => p.entrypoint === DEFAULT_ENTRYPOINT && p.bundle === null) ?? plugins[0]
