import { createContext, useContext } from 'react'
import type { StreamStatus } from './stream'

/** Whether the cluster WebSocket is up. List queries poll only while it is not. */
export const ClusterStreamContext = createContext<{ live: boolean; status: StreamStatus }>({
  live: false,
  status: 'closed',
})

export const POLL_FALLBACK_MS = 5_000

export function useClusterStreamLive(): boolean {
  return useContext(ClusterStreamContext).live
}

export function useClusterStreamStatus(): StreamStatus {
  return useContext(ClusterStreamContext).status
}
