import { lazy, Suspense } from 'react'
import './topology.css'
import type { TopologyGraphProps } from './TopologyGraph'

// React Flow is loaded with the first graph shown, not with the app.
const Graph = lazy(() => import('./TopologyGraph').then((m) => ({ default: m.TopologyGraph })))

export function TopologyGraph(props: TopologyGraphProps) {
  return (
    <Suspense fallback={<div className="topo-canvas topo-loading">Loading the graph…</div>}>
      <Graph {...props} />
    </Suspense>
  )
}
