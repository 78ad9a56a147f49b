import {
  Background,
  ControlButton,
  Controls,
  ReactFlow,
  ReactFlowProvider,
  getViewportForBounds,
  useReactFlow,
  useStore,
  type EdgeTypes,
  type NodeTypes,
} from '@xyflow/react'
import '@xyflow/react/dist/style.css'
import { useCallback, useLayoutEffect, useRef } from 'react'
import type { TopologyLayout } from './layout'
import { RoutedEdge } from './RoutedEdge'
import { ControlPlaneCard, JobNodeCard, MachineCard } from './TopologyNodes'

// Constants: React Flow re-mounts every node when these objects change identity.
const nodeTypes: NodeTypes = { controlPlane: ControlPlaneCard, machine: MachineCard, jobNode: JobNodeCard }
const edgeTypes: EdgeTypes = { routed: RoutedEdge }

const MIN_ZOOM = 0.2
/** Small clusters are drawn a little larger than life, not blown up to fill the screen. */
const MAX_FIT_ZOOM = 1.2

export interface TopologyGraphProps {
  layout: TopologyLayout
  label: string
  /** Wheel zooms the graph (a page of its own); off where the graph sits in a scrolling page. */
  zoomOnScroll?: boolean
}

/**
 * Draws a layout read-only: nothing drags, connects or gets selected; what a user can do is
 * follow the links inside the nodes (Tab reaches them), pan and zoom.
 */
export function TopologyGraph(props: TopologyGraphProps) {
  return (
    <ReactFlowProvider>
      <Graph {...props} />
    </ReactFlowProvider>
  )
}

function Graph({ layout, label, zoomOnScroll = false }: TopologyGraphProps) {
  const { setViewport } = useReactFlow()
  const width = useStore((state) => state.width)
  const height = useStore((state) => state.height)
  const userMoved = useRef(false)
  const fitted = useRef<string | null>(null)

  // To the layout's bounds, not the nodes': links running below the last row stay in view.
  const fit = useCallback(
    (duration: number) => {
      const viewport = getViewportForBounds(layout.bounds, width, height, MIN_ZOOM, MAX_FIT_ZOOM, 0.06)
      void setViewport(viewport, { duration })
    },
    [layout.bounds, width, height, setViewport],
  )

  // Fits once the pane has a size, then again when machines or job nodes come or go or the pane
  // is resized, unless the user has panned or zoomed by hand. Streamed load and status never
  // change positions, so they never move the view. Before paint: no frame at the default view.
  useLayoutEffect(() => {
    if (!width || !height) return
    const key = `${layout.structureKey}@${width}x${height}`
    if (fitted.current === key) return
    const first = fitted.current === null
    fitted.current = key
    if (first || !userMoved.current) fit(first ? 0 : 200)
  }, [layout.structureKey, width, height, fit])

  return (
    <div className="topo-canvas" role="figure" aria-label={label}>
      <ReactFlow
        nodes={layout.nodes}
        edges={layout.edges}
        nodeTypes={nodeTypes}
        edgeTypes={edgeTypes}
        minZoom={MIN_ZOOM}
        maxZoom={2}
        nodesDraggable={false}
        nodesConnectable={false}
        elementsSelectable={false}
        nodesFocusable={false}
        edgesFocusable={false}
        zoomOnScroll={zoomOnScroll}
        panOnScroll={false}
        preventScrolling={zoomOnScroll}
        zoomOnDoubleClick={false}
        onMoveStart={(event) => {
          // Only a person's gesture carries an event; fitting and the zoom buttons do not.
          if (event) userMoved.current = true
        }}
      >
        <Background gap={24} size={1} color="#d5dae1" />
        <Controls
          showInteractive={false}
          showFitView={false}
          onZoomIn={() => (userMoved.current = true)}
          onZoomOut={() => (userMoved.current = true)}
        >
          <ControlButton
            title="Fit the whole picture"
            aria-label="Fit the whole picture"
            onClick={() => {
              userMoved.current = false
              fit(200)
            }}
          >
            <svg viewBox="0 0 32 30" aria-hidden="true">
              <path d="M3.692 4.63c0-.53.4-.938.939-.938h5.215V0H4.708C2.13 0 0 2.054 0 4.63v5.216h3.692V4.631zM27.354 0h-5.2v3.692h5.17c.53 0 .984.4.984.939v5.215H32V4.631A4.624 4.624 0 0027.354 0zm.954 24.83c0 .532-.4.94-.939.94h-5.215v3.768h5.215c2.577 0 4.631-2.13 4.631-4.707v-5.139h-3.692v5.139zm-23.677.94c-.531 0-.939-.4-.939-.94v-5.138H0v5.139c0 2.577 2.13 4.707 4.708 4.707h5.138V25.77H4.631z" />
            </svg>
          </ControlButton>
        </Controls>
      </ReactFlow>
    </div>
  )
}
