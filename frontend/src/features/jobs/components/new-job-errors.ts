import { flattenFieldErrors } from '../../../lib/api'

/** Which error paths of the JobSpec belong to which form field. */
const FIELD_FOR_PATH: [field: string, matches: (path: string) => boolean][] = [
  ['name', (p) => p === 'name'],
  ['entrypoint', (p) => p === 'entrypoint'],
  ['nodes', (p) => p === 'resources.nodes'],
  ['procs_per_node', (p) => p === 'resources.procs_per_node'],
  ['steps', (p) => p === 'args' || p.startsWith('args.')],
  ['max_restarts', (p) => p === 'fault_tolerance.max_restarts'],
]

/** Splits flattened DRF errors into per-field messages and the rest (shown above the buttons). */
export function errorsByField(body: unknown): Record<string, string[]> {
  const out: Record<string, string[]> = {}
  for (const [path, messages] of Object.entries(flattenFieldErrors(body))) {
    const field = FIELD_FOR_PATH.find(([, matches]) => matches(path))?.[0]
    const key = field ?? ''
    const shown = field || !path ? messages : messages.map((m) => `${path}: ${m}`)
    out[key] = [...(out[key] ?? []), ...shown]
  }
  return out
}
