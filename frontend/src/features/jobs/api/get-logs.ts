import { api, dataOf } from '../../../lib/api'
import { isLogEvent, type LogEvent } from '../../../lib/types'

/** Lines fetched per page when the user scrolls above the lines in memory. */
export const OLDER_PAGE = 1_000

/** The `count` lines just before the line with id `before`, oldest first (GET /logs?tail=&before=). */
export async function fetchOlderLogs(jobId: number, before: number, count = OLDER_PAGE): Promise<LogEvent[]> {
  const page = await dataOf(
    api.GET('/api/jobs/{job_id}/logs', { params: { path: { job_id: jobId }, query: { tail: count, before } } }),
  )
  return page.events.filter(isLogEvent)
}
