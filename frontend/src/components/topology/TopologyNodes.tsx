import type { NodeProps } from '@xyflow/react'
import { memo } from 'react'
import { Link } from 'react-router-dom'
import { formatGiB } from '../../lib/format'
import { volumeSummary } from '../../lib/machine-summary'
import type { MachineUsage } from '../../lib/types'
import { StatusBadge } from '../StatusBadge'
import type { ControlPlaneNode, JobNodeNode, MachineNode } from './layout'

export const ControlPlaneCard = memo(function ControlPlaneCard({ data }: NodeProps<ControlPlaneNode>) {
  return (
    <div className="topo-control-plane">
      <span className="brand-mark" aria-hidden="true" />
      <div className="topo-control-plane-text">
        <div className="topo-title">{data.title}</div>
        <div className="topo-sub">{data.detail}</div>
      </div>
    </div>
  )
})

function Meter({ label, percent }: { label: string; percent: number | null | undefined }) {
  const value = percent == null ? null : Math.min(100, Math.max(0, percent))
  const level = value == null ? 'none' : value >= 90 ? 'high' : value >= 70 ? 'mid' : 'low'
  return (
    <div className="topo-meter" title={value == null ? `${label}: not reported` : `${label} ${value.toFixed(0)}%`}>
      <span className="topo-meter-label">{label}</span>
      <span className="topo-meter-track">
        <span className={`topo-meter-fill usage-${level}`} style={{ width: `${value ?? 0}%` }} />
      </span>
      <span className="topo-meter-value">{value == null ? '—' : `${value.toFixed(0)}%`}</span>
    </div>
  )
}

function usageText(u: MachineUsage): string {
  const parts = [u.gpus ? `${u.gpus} GPU${u.gpus === 1 ? '' : 's'}` : '', `${u.processes} proc${u.processes === 1 ? '' : 's'}`]
  return `${u.project}: ${parts.filter(Boolean).join(', ')}`
}

export const MachineCard = memo(function MachineCard({ data }: NodeProps<MachineNode>) {
  const { machine, removed, heldGpus, otherUsage, empty, headerHeight } = data
  const caps = machine.capabilities
  const gpus = caps.gpus?.length
    ? caps.gpus
    : Array.from({ length: caps.gpu_count ?? 0 }, (_, index) => ({ index, name: 'GPU', memory_mb: 0 }))
  const gpuUse = machine.current_load.gpu_usage ?? []
  const size = [
    caps.cpu_count != null ? `${caps.cpu_count} CPUs` : null,
    caps.memory != null ? `${formatGiB(caps.memory)} GB` : null,
  ].filter(Boolean)
  const status = removed ? 'removed' : machine.status
  const volumes = machine.volumes ?? []
  return (
    <div className={`topo-machine topo-machine-${status}`}>
      <div className="topo-machine-top" style={{ height: headerHeight }}>
        <div className="topo-machine-head">
          {removed ? (
            <span className="topo-machine-name">{machine.name}</span>
          ) : (
            <Link to="/machines" className="topo-machine-name" aria-label={`Machine ${machine.name}, ${machine.status}`}>
              {machine.name}
            </Link>
          )}
          <StatusBadge status={status} />
        </div>
        <div className="topo-sub mono" title={machine.host}>
          {machine.host}
          {size.length > 0 && <span className="topo-size"> · {size.join(' · ')}</span>}
          {volumes.length > 0 && (
            <span className="topo-size" title={volumes.map(volumeSummary).join('\n')} aria-label={`Volumes: ${volumes.map((v) => v.name).join(', ')}`}>
              {' '}
              · vol {volumes.map((v) => v.name).join(', ')}
            </span>
          )}
        </div>
        <div className="topo-meters">
          <Meter label="CPU" percent={machine.current_load.cpu_usage} />
          <Meter label="Mem" percent={machine.current_load.memory_usage} />
        </div>
        <div className="topo-gpus" aria-label={`${gpus.length} GPUs`}>
          {gpus.length === 0 && <span className="topo-gpu topo-gpu-none">no GPUs</span>}
          {gpus.map((gpu) => {
            const use = gpuUse[gpu.index]
            const held = heldGpus[gpu.index]
            return (
              <span
                key={gpu.index}
                className={`topo-gpu${held ? ' topo-gpu-held' : ''}`}
                style={held ? { borderColor: held } : undefined}
                title={`GPU ${gpu.index}: ${gpu.name}${gpu.memory_mb ? `, ${(gpu.memory_mb / 1024).toFixed(0)} GB` : ''}${use == null ? '' : `, ${use.toFixed(0)}% busy`}${held ? ', held by a job shown here' : ''}`}
              >
                <span className="topo-gpu-fill" style={{ width: `${Math.min(100, Math.max(0, use ?? 0))}%` }} />
                <span className="topo-gpu-text">
                  GPU{gpu.index} {use == null ? '—' : `${use.toFixed(0)}%`}
                </span>
              </span>
            )
          })}
        </div>
        <div className="topo-usage" title="Other projects' live nodes here (counts only)">
          {otherUsage.length ? `also in use: ${otherUsage.map(usageText).join('; ')}` : ''}
        </div>
      </div>
      {empty && <div className="topo-idle">{removed ? 'removed from the cluster' : otherUsage.length ? "other projects' jobs only" : 'idle'}</div>}
    </div>
  )
})

function rankRange(start: number, end: number): string {
  return start === end ? `rank ${start}` : `ranks ${start}–${end}`
}

export const JobNodeCard = memo(function JobNodeCard({ data }: NodeProps<JobNodeNode>) {
  const { job, node, nodeCount, isMaster, colour, linked } = data
  const total = job.progress.total_steps
  const step = node.progress?.step ?? null
  const fraction = total && step != null ? Math.min(1, step / total) : null
  const master = job.master_addr ? `${job.master_addr}${job.master_port ? `:${job.master_port}` : ''}` : ''
  const label =
    `Job ${job.name} (#${job.id}), node ${node.node_rank} of ${nodeCount} on ${node.machine.name}, ` +
    `${rankRange(node.rank_start, node.rank_end)}${node.gpus?.length ? `, GPUs ${node.gpus.join(', ')}` : ''}, ` +
    `${node.status}${isMaster ? ', master' : ''}`
  const body = (
    <>
      <div className="topo-job-line">
        <span className="topo-job-name">{job.name}</span>
        <span className="topo-job-id">#{job.id}</span>
        <span className="spacer" />
        <StatusBadge status={node.status} />
      </div>
      <div className="topo-job-line topo-sub">
        <span>node {node.node_rank}</span>
        <span className="mono">{rankRange(node.rank_start, node.rank_end)}</span>
        {isMaster && (
          <span className="topo-master" title={master ? `master: rendezvous at ${master}` : 'master node'}>
            ★ master
          </span>
        )}
        <span className="spacer" />
        {step != null && (
          <span className="topo-step" title={total ? `step ${step} of ${total}` : `step ${step}`}>
            {fraction != null ? `${Math.floor(fraction * 100)}%` : `step ${step}`}
          </span>
        )}
      </div>
      <span className="topo-job-progress" aria-hidden="true">
        <span style={{ width: `${(fraction ?? 0) * 100}%`, background: colour }} />
      </span>
    </>
  )
  return (
    <div className={`topo-job topo-job-${node.status}`} style={{ borderLeftColor: colour }}>
      {linked ? (
        <Link to={`/jobs/${job.id}`} className="topo-job-body" aria-label={label} title={`Open ${job.name}`}>
          {body}
        </Link>
      ) : (
        <div className="topo-job-body" aria-label={label} role="group">
          {body}
        </div>
      )}
    </div>
  )
})
