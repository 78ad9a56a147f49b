import { useQueryClient } from '@tanstack/react-query'
import { useEffect, useState } from 'react'
import { ReconnectingStream, wsUrl, type StreamStatus } from '../../../lib/stream'
import { applyJobStreamMessages } from '../api/cache'
import { jobQueryKey } from '../api/get-job'
import { jobEventsQueryKey, type JobEventsState } from '../api/job-events'
import { recheckSessionOnRefusal } from '../../auth/api/get-me'

/**
 * Messages are applied at most this often: a replay or a flood becomes a few renders a second
 * (charts and log redraw at ~10/s), not one per frame.
 */
export const JOB_STREAM_FLUSH_MS = 100

/** The stream's status, with "reconnecting" for a stream that was open and dropped. */
export type JobStreamStatus = StreamStatus | 'reconnecting'

/**
 * Follows /api/jobs/{id}/stream while mounted: each rank's latest lines first (older ones page on
 * scroll) or, resuming, a replay after our cursor; then live. Every reconnect resumes from the last
 * event id in the cache, so nothing is fetched twice.
 */
export function useJobStream(jobId: number): JobStreamStatus {
  const queryClient = useQueryClient()
  const [status, setStatus] = useState<JobStreamStatus>('connecting')

  useEffect(() => {
    let opened = false
    let pending: unknown[] = []
    let timer: ReturnType<typeof setTimeout> | null = null
    const flush = () => {
      if (timer !== null) clearTimeout(timer)
      timer = null
      const batch = pending
      pending = []
      applyJobStreamMessages(queryClient, jobId, batch)
    }
    const stream = new ReconnectingStream({
      url: () => {
        flush() // the cursor is the last event applied: apply what came first
        const cursor = queryClient.getQueryData<JobEventsState>(jobEventsQueryKey(jobId))?.lastId ?? 0
        return wsUrl(`/api/jobs/${jobId}/stream?after=${cursor}&history=tail`)
      },
      onMessage: (message) => {
        pending.push(message)
        timer ??= setTimeout(flush, JOB_STREAM_FLUSH_MS)
      },
      // Once open, any status but open means we are on our way back (stop() on unmount aside).
      onStatus: (next) => {
        if (next !== 'open') flush() // dropped: what arrived is applied, the notice shows its cursor
        setStatus(next !== 'open' && opened ? 'reconnecting' : next)
      },
      onRefused: recheckSessionOnRefusal(queryClient),
      onOpen: () => {
        // Events missed while down are replayed; the snapshot (plan, nodes) is simply refetched.
        if (opened) void queryClient.invalidateQueries({ queryKey: jobQueryKey(jobId), exact: true })
        opened = true
      },
    })
    stream.start()
    return () => {
      stream.stop()
      flush()
    }
  }, [jobId, queryClient])

  return status
}
