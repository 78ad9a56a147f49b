import { formatGiB, formatNumber } from './format'
import type { Machine, MachineVolume } from './types'

function count(n: number, one: string, many: string): string {
  return `${n} ${n === 1 ? one : many}`
}

/** "10.0.0.12:8001", "[fd00::2]:8001": the host with the port the machine was added with. */
export const hostAndPort = (machine: Machine): string =>
  `${machine.host.includes(':') && !machine.host.startsWith('[') ? `[${machine.host}]` : machine.host}:${machine.port}`

/** "16 CPUs · 64.0 GiB": what its agent reported, "not reported yet" before it did. */
export function hostSummary(machine: Machine): string {
  const { cpu_count, memory } = machine.capabilities
  if (cpu_count == null && memory == null) return 'not reported yet'
  return `${cpu_count == null ? '?' : count(cpu_count, 'CPU', 'CPUs')} · ${formatGiB(memory)} GiB`
}

/**
 * Each network interface its agent reports, with what the latest job preflight measured on it:
 * "eth1 10.9.0.2 · 10 Gb/s link · measured 480 MB/s, 0.05 ms (job #12)". Interfaces measured but no
 * longer reported (renamed, down) are left out: the figure belongs to an interface that is there.
 */
export function interfaceLines(machine: Machine): { name: string; text: string; measured: boolean }[] {
  const measured = machine.measured_links ?? {}
  return (machine.capabilities.interfaces ?? []).map((i) => {
    const parts = [`${i.interface} ${i.address}`]
    if (i.speed_mbit) parts.push(`${i.speed_mbit >= 1000 ? `${i.speed_mbit / 1000} Gb/s` : `${i.speed_mbit} Mb/s`} link`)
    const m = measured[i.interface]
    if (m) parts.push(`measured ${formatNumber(m.mb_per_s, 0)} MB/s, ${formatNumber(m.latency_ms, 2)} ms (job #${m.job})`)
    return { name: i.interface, text: parts.join(' · '), measured: Boolean(m) }
  })
}

/** "2 × A100 · 80 GiB each", "no GPUs". */
export function gpuSummary(machine: Machine): string {
  const { gpu_count, gpus } = machine.capabilities
  if (!gpu_count) return 'no GPUs'
  const names = [...new Set((gpus ?? []).map((g) => g.name))]
  const memory = [...new Set((gpus ?? []).map((g) => g.memory_mb))]
  const each = memory.length === 1 ? ` · ${(memory[0] / 1024).toFixed(0)} GiB each` : ''
  return `${gpu_count} × ${names.length ? names.join(', ') : 'GPU'}${each}`
}

/** "GPUs declared by its agent (2 seen by NVML)": only the declared GPUs are scheduled. */
export function gpuDeclaration(machine: Machine): string | null {
  const { gpus_declared, gpus_detected } = machine.capabilities
  if (!gpus_declared) return null
  const seen = gpus_detected?.length ?? 0
  return `GPUs declared by its agent (${seen ? `${seen} seen by NVML` : 'none seen by NVML'})`
}

/** Versions in a tooltip: they matter when a launch fails, not at a glance. */
export function versionsOf(machine: Machine): string {
  const { python_version, torch_version } = machine.capabilities
  return [
    machine.agent_version && `agent ${machine.agent_version}`,
    python_version && `Python ${python_version}`,
    torch_version && `torch ${torch_version}`,
  ]
    .filter(Boolean)
    .join(', ')
}

/** Who holds the machine: every project's GPUs and processes (everyone sees this, not the jobs). */
export function usageSummary(machine: Machine): string {
  if (!machine.usage?.length) return '—'
  return machine.usage
    .map((u) => `${u.project}: ${u.gpus ? `${count(u.gpus, 'GPU', 'GPUs')}, ` : ''}${count(u.processes, 'process', 'processes')}`)
    .join('; ')
}

/** How many GPUs to draw a bar for: those reported, or those with a load (an older agent). */
export function gpuIndexes(machine: Machine): number[] {
  const n = Math.max(machine.capabilities.gpu_count ?? 0, machine.current_load.gpu_usage?.length ?? 0)
  return Array.from({ length: n }, (_, i) => i)
}

/** "shared-data /mnt/nfs · 40% full of 1.0 TiB"; "missing" when its agent finds no such
 * directory; "not checked" when only the server declares it. */
export function volumeSummary(volume: MachineVolume): string {
  const where = `${volume.name} ${volume.path}`
  if (volume.exists === false) return `${where} · missing`
  if (volume.exists == null || volume.total_bytes == null || volume.free_bytes == null) return `${where} · not checked`
  const full = volume.total_bytes ? Math.round((100 * (volume.total_bytes - volume.free_bytes)) / volume.total_bytes) : 0
  const total = volume.total_bytes / 1024 ** 4 >= 1 ? `${(volume.total_bytes / 1024 ** 4).toFixed(1)} TiB` : `${formatGiB(volume.total_bytes)} GiB`
  return `${where} · ${full}% full of ${total}`
}

/** The server's declarations as the edit field shows them: one `name=/path` a line. */
export function volumesText(declared: Record<string, string>): string {
  return Object.entries(declared)
    .map(([name, path]) => `${name}=${path}`)
    .join('\n')
}

/** The edit field's text back to declarations; the server checks names and paths (400 on a bad one). */
export function parseVolumesText(text: string): Record<string, string> | string {
  const volumes: Record<string, string> = {}
  for (const line of text.split('\n').map((l) => l.trim()).filter(Boolean)) {
    const at = line.indexOf('=')
    if (at < 1) return `"${line}": write name=/absolute/path`
    volumes[line.slice(0, at).trim()] = line.slice(at + 1).trim()
  }
  return volumes
}

/** The last answer to a ping or a health check, whichever came last. */
export interface RoundTrip {
  reachable: boolean
  rtt_ms: number | null
  /** How long the ping waited (a health check does not say). */
  timeout_s?: number
}

export function roundTripText(result: RoundTrip): string {
  if (result.reachable && result.rtt_ms != null) return `${result.rtt_ms < 10 ? result.rtt_ms.toFixed(1) : Math.round(result.rtt_ms)} ms`
  return 'no answer'
}
