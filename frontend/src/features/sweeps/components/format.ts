/** A trial's hyperparameters as one line: "lr=0.0031, hidden=64". */
export function formatParams(params: Record<string, unknown>): string {
  return Object.entries(params)
    .map(([k, v]) => `${k}=${typeof v === 'number' && !Number.isInteger(v) ? v.toPrecision(3) : String(v)}`)
    .join(', ')
}
