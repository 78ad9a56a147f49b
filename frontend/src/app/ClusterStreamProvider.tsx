import { useQueryClient } from '@tanstack/react-query'
import { useEffect, useMemo, useState, type ReactNode } from 'react'
import { ClusterStreamContext } from '../lib/cluster-stream-status'
import { ReconnectingStream, wsUrl, type StreamStatus } from '../lib/stream'
import { applyClusterMessage } from './cluster-stream'
import { recheckSessionOnRefusal } from '../features/auth/api/get-me'

/**
 * Holds /api/cluster/stream open while someone is logged in. Messages go straight into the
 * machines and jobs caches; while the socket is down the list queries poll instead.
 */
export function ClusterStreamProvider({ children }: { children: ReactNode }) {
  const queryClient = useQueryClient()
  const [status, setStatus] = useState<StreamStatus>('connecting')

  useEffect(() => {
    const stream = new ReconnectingStream({
      url: () => wsUrl('/api/cluster/stream'),
      onMessage: (message) => applyClusterMessage(queryClient, message),
      onStatus: setStatus,
      onRefused: recheckSessionOnRefusal(queryClient),
    })
    stream.start()
    return () => stream.stop()
  }, [queryClient])

  const value = useMemo(() => ({ live: status === 'open', status }), [status])
  return <ClusterStreamContext.Provider value={value}>{children}</ClusterStreamContext.Provider>
}
