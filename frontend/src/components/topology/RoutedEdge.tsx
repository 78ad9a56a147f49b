import { BaseEdge, type EdgeProps } from '@xyflow/react'
import { memo } from 'react'
import type { TopologyEdge } from './layout'
import { roundedPath } from './routes'

/** A link along the route the layout computed (positions never move, so it ignores the handles). */
export const RoutedEdge = memo(function RoutedEdge({ id, data, style }: EdgeProps<TopologyEdge>) {
  return <BaseEdge id={id} path={roundedPath(data?.points ?? [])} style={style} interactionWidth={0} />
})
