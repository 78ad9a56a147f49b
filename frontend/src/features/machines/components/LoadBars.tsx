import { UsageBar } from '../../../components/UsageBar'
import type { Machine } from '../../../lib/types'
import { gpuIndexes } from '../../../lib/machine-summary'

/** CPU, memory and each GPU's use as of the last heartbeat (the cluster stream keeps it live). */
export function LoadBars({ machine }: { machine: Machine }) {
  const load = machine.current_load
  const gpus = machine.capabilities.gpus ?? []
  return (
    <div className="load-bars">
      <span className="load-name">CPU</span>
      <UsageBar percent={load.cpu_usage} label="CPU" />
      <span className="load-name">Mem</span>
      <UsageBar percent={load.memory_usage} label="Memory" />
      {gpuIndexes(machine).map((index) => (
        <GpuBar key={index} index={index} name={gpus.find((g) => g.index === index)?.name} percent={load.gpu_usage?.[index]} />
      ))}
    </div>
  )
}

function GpuBar({ index, name, percent }: { index: number; name?: string; percent?: number }) {
  return (
    <>
      <span className="load-name" title={name}>
        GPU{index}
      </span>
      <UsageBar percent={percent} label={`GPU ${index}${name ? ` (${name})` : ''}`} />
    </>
  )
}
