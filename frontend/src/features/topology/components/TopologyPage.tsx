import { useMemo } from 'react'
import { QueryError } from '../../../components/QueryError'
import type { JobDetail, Machine } from '../../../lib/types'
import { useJobs } from '../../jobs/api/get-jobs'
import { useMachines } from '../../machines/api/get-machines'
import { usePlacedJobs } from '../api/get-placed-jobs'
import { layoutTopology } from '../../../components/topology/layout'
import { TopologyGraph } from '../../../components/topology/LazyTopologyGraph'

const LEGEND: [string, string][] = [
  ['online', 'var(--green)'],
  ['busy', 'var(--blue)'],
  ['draining', 'var(--amber)'],
  ['quarantined', 'var(--purple, #7b4bb7)'],
  ['offline', 'var(--red)'],
  ['pending', 'var(--grey)'],
]

const plural = (n: number, one: string, many = `${one}s`) => `${n} ${n === 1 ? one : many}`

function clusterSummary(machines: Machine[], jobs: JobDetail[]): string {
  const online = machines.filter((m) => m.status === 'online' || m.status === 'busy').length
  const nodes = jobs.reduce((sum, j) => sum + j.nodes.length, 0)
  return `${online} of ${plural(machines.length, 'machine')} up · ${plural(jobs.length, 'job')} on ${plural(nodes, 'node')}`
}

/** The whole cluster: the control plane, every machine, every placed job of the user's projects. */
export function TopologyPage() {
  const machines = useMachines()
  const jobs = useJobs()
  const placed = usePlacedJobs(jobs.data)

  const layout = useMemo(
    () =>
      layoutTopology({
        machines: machines.data ?? [],
        jobs: placed,
        controlPlane: { title: 'Control plane', detail: clusterSummary(machines.data ?? [], placed) },
      }),
    [machines.data, placed],
  )

  return (
    <div className="topo-page">
      <section className="panel" aria-labelledby="topology-title">
        <header className="panel-header">
          <h2 id="topology-title">Topology</h2>
          <span className="muted small">{clusterSummary(machines.data ?? [], placed)}</span>
          <div className="spacer" />
          <span className="topo-legend small muted" aria-label="Legend">
            {LEGEND.map(([status, colour]) => (
              <span key={status} className="topo-legend-item">
                <span className="topo-swatch" style={{ background: colour }} />
                {status}
              </span>
            ))}
            <span className="topo-legend-item">
              <span className="topo-master">★ master</span> node 0, where ranks meet
            </span>
          </span>
        </header>
        {machines.isError && <QueryError error={machines.error} what="machines" onRetry={() => void machines.refetch()} retrying={machines.isFetching} />}
        {jobs.isError && <QueryError error={jobs.error} what="jobs" onRetry={() => void jobs.refetch()} retrying={jobs.isFetching} />}
        {machines.isPending ? (
          <p className="muted">Loading…</p>
        ) : (
          <>
            {machines.data?.length === 0 && (
              <p className="empty">No machines yet: add one on the Machines page and start its agent.</p>
            )}
            <TopologyGraph layout={layout} label="Cluster topology" zoomOnScroll />
          </>
        )}
      </section>
    </div>
  )
}
