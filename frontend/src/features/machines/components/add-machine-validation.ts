// What POST /api/machines accepts (machines/serializers.py MachineIn), checked while the user types;
// the server checks it again, and its answer (a name taken meanwhile) is shown the same way.

export interface AddMachineInput {
  name: string
  host: string
  /** Digits as typed; empty: the server's default (DEFAULT_PORT). */
  port: string
  /** "key=value, key=value" */
  labels: string
}

/** MachineIn's default port, which TransformerLab's machine list records beside the host. */
export const DEFAULT_PORT = 8001

export type AddMachineErrors = Partial<Record<keyof AddMachineInput, string[]>>

const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/
// A hostname, an IPv4 address or an IPv6 one (with or without brackets, maybe a %zone).
const HOST = /^(\[[0-9A-Fa-f:.%\w]+\]|[A-Za-z0-9._:%-]+)$/

export function parseLabels(text: string): { labels: Record<string, string>; errors: string[] } {
  const labels: Record<string, string> = {}
  const errors: string[] = []
  for (const item of text.split(',').map((part) => part.trim()).filter(Boolean)) {
    const at = item.indexOf('=')
    const key = at < 0 ? item : item.slice(0, at).trim()
    const value = at < 0 ? '' : item.slice(at + 1).trim()
    if (at < 0 || !key) errors.push(`"${item}" is not key=value.`)
    else if (key in labels) errors.push(`"${key}" is given twice.`)
    else if (value.length > 200) errors.push(`"${key}" is longer than 200 characters.`)
    else labels[key] = value
  }
  return { labels, errors }
}

export function validateAddMachine(input: AddMachineInput, takenNames: ReadonlySet<string>): AddMachineErrors {
  const errors: AddMachineErrors = {}
  const name = input.name.trim()
  const host = input.host.trim()
  if (!name) errors.name = ['required.']
  else if (name.length > 100) errors.name = ['at most 100 characters.']
  else if (!NAME.test(name)) errors.name = ["letters, digits, '.', '_' and '-' only, starting with a letter or digit."]
  else if (takenNames.has(name)) errors.name = [`a machine named '${name}' already exists.`]
  if (!host) errors.host = ['required: the address the other machines reach it at.']
  else if (host.length > 255) errors.host = ['at most 255 characters.']
  else if (!HOST.test(host)) errors.host = ['a hostname or an IP address (no spaces or slashes).']
  const port = input.port.trim()
  if (port && !(/^\d+$/.test(port) && Number(port) >= 1 && Number(port) <= 65535)) errors.port = ['a port number, 1 to 65535.']
  const labels = parseLabels(input.labels).errors
  if (labels.length) errors.labels = labels
  return errors
}

export const hasErrors = (errors: AddMachineErrors) => Object.values(errors).some((messages) => messages?.length)
