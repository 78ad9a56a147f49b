import { flattenFieldErrors } from '../../../lib/api'
import type { PlanRefusal } from '../../../lib/types'

/** Which error paths of the JobSpec belong to which form field. */
const FIELD_FOR_PATH: [field: string, matches: (path: string) => boolean][] = [
  ['name', (p) => p === 'name'],
  ['project', (p) => p === 'project'],
  ['entrypoint', (p) => p === 'entrypoint' || p === 'code' || p.startsWith('code.')],
  ['nodes', (p) => p === 'resources.nodes'],
  ['procs_per_node', (p) => p === 'resources.procs_per_node'],
  ['gpus_per_node', (p) => p === 'resources.gpus_per_node'],
  ['min_gpu_memory_gb', (p) => p === 'resources.min_gpu_memory'],
  // args.0 and args.1 are the form's own "--steps N" (a built-in recipe's); the rest are the extra argument rows.
  ['steps', (p) => p === 'args.0' || p === 'args.1'],
  ['args', (p) => p === 'args' || p.startsWith('args.')],
  ['env', (p) => p === 'env' || p.startsWith('env.')],
  ['machines', (p) => p === 'placement.machines' || p.startsWith('placement.machines.')],
  ['policy', (p) => p === 'placement.policy'],
  ['batch_size', (p) => p === 'hyperparameters' || p === 'hyperparameters.batch_size'],
  ['lr', (p) => p === 'hyperparameters.lr'],
  ['config', (p) => p.startsWith('hyperparameters.')],
  ['scaling', (p) => p.startsWith('scaling')],
  ['max_restarts', (p) => p === 'fault_tolerance.max_restarts'],
  ['recovery', (p) => p === 'fault_tolerance.mode'],
]

/**
 * Splits flattened DRF errors into per-field messages and the rest (shown above the buttons).
 * `steps`: whether the form sends `--steps N` first (a built-in recipe); otherwise every argument is a row's.
 */
export function errorsByField(body: unknown, { steps = true }: { steps?: boolean } = {}): Record<string, string[]> {
  const out: Record<string, string[]> = {}
  const fields = steps ? FIELD_FOR_PATH : FIELD_FOR_PATH.filter(([field]) => field !== 'steps')
  for (const [path, messages] of Object.entries(flattenFieldErrors(body))) {
    const field = fields.find(([, matches]) => matches(path))?.[0]
    const key = field ?? ''
    const shown = field || !path ? messages : messages.map((m) => `${path}: ${m}`)
    out[key] = [...(out[key] ?? []), ...shown]
  }
  return out
}

/** The planner's refusal (web/errors.py answers it with `skipped`), or null for any other 400. */
export function planRefusalOf(body: unknown): PlanRefusal | null {
  if (typeof body !== 'object' || body === null) return null
  const { detail, skipped } = body as Partial<PlanRefusal>
  if (typeof detail !== 'string' || !Array.isArray(skipped)) return null
  return body as PlanRefusal
}
