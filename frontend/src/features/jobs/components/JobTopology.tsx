import { useMemo } from 'react'
import { QueryError } from '../../../components/QueryError'
import type { JobDetail } from '../../../lib/types'
import { currentNodes, layoutTopology } from '../../../components/topology/layout'
import { TopologyGraph } from '../../../components/topology/LazyTopologyGraph'
import { useMachines } from '../../machines/api/get-machines'

/** The topology picture of one job: its nodes on their machines, under the control plane. */
export function JobTopology({ job }: { job: JobDetail }) {
  const machines = useMachines()
  const layout = useMemo(() => {
    const nodes = currentNodes(job)
    const used = new Set(nodes.map((n) => n.machine.id))
    const master = job.master_addr ? `master ${job.master_addr}${job.master_port ? `:${job.master_port}` : ''}` : 'no master yet'
    return layoutTopology({
      machines: (machines.data ?? []).filter((m) => used.has(m.id)),
      jobs: [job],
      controlPlane: { title: 'Control plane', detail: `attempt ${job.attempt} · ${master}` },
      linkJobs: false,
    })
  }, [job, machines.data])

  if (job.nodes.length === 0) return null
  // Tall enough for the whole picture at full size, up to a limit; the view fits it in.
  const height = Math.min(460, Math.max(260, layout.bounds.height + 48))
  return (
    <section className="panel" aria-labelledby="job-topology-title">
      <header className="panel-header">
        <h2 id="job-topology-title">Topology</h2>
        <span className="muted small">★ master: node 0, where the ranks meet</span>
      </header>
      {machines.isError ? (
        <QueryError error={machines.error} what="machines" onRetry={() => void machines.refetch()} retrying={machines.isFetching} />
      ) : (
        // Drawn once the machines are known, so no node shows on a made-up machine meanwhile.
        <div style={{ height }}>
          {machines.data && <TopologyGraph layout={layout} label={`Topology of ${job.name}`} />}
        </div>
      )}
    </section>
  )
}
