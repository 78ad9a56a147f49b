import { useQueryClient } from '@tanstack/react-query'
import { useEffect, useState } from 'react'
import { ReconnectingStream, wsUrl, type StreamStatus } from '../../../lib/stream'
import { applyJobStreamMessage } from '../api/cache'
import { jobQueryKey } from '../api/get-job'
import { jobEventsQueryKey, type JobEventsState } from '../api/job-events'
import { recheckSessionOnRefusal } from '../../auth/api/get-me'

/** The stream's status, with "reconnecting" for a stream that was open and dropped. */
export type JobStreamStatus = StreamStatus | 'reconnecting'

/**
 * Follows /api/jobs/{id}/stream while mounted: replay after our cursor, then live. Every
 * reconnect resumes from the last event id in the cache, so nothing is fetched twice.
 */
export function useJobStream(jobId: number): JobStreamStatus {
  const queryClient = useQueryClient()
  const [status, setStatus] = useState<JobStreamStatus>('connecting')

  useEffect(() => {
    let opened = false
    const stream = new ReconnectingStream({
      url: () => {
        const cursor = queryClient.getQueryData<JobEventsState>(jobEventsQueryKey(jobId))?.lastId ?? 0
        return wsUrl(`/api/jobs/${jobId}/stream?after=${cursor}`)
      },
      onMessage: (message) => applyJobStreamMessage(queryClient, jobId, message),
      // Once open, any status but open means we are on our way back (stop() on unmount aside).
      onStatus: (next) => setStatus(next !== 'open' && opened ? 'reconnecting' : next),
      onRefused: recheckSessionOnRefusal(queryClient),
      onOpen: () => {
        // Events missed while down are replayed; the snapshot (plan, nodes) is simply refetched.
        if (opened) void queryClient.invalidateQueries({ queryKey: jobQueryKey(jobId), exact: true })
        opened = true
      },
    })
    stream.start()
    return () => stream.stop()
  }, [jobId, queryClient])

  return status
}
