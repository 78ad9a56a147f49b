import { api } from '../../../lib/api'
import type { EventPage, LogEvent } from '../../../lib/types'

/** Lines fetched per page when the user scrolls above the lines in memory. */
export const OLDER_PAGE = 1_000

/** The `count` lines just before the line with id `before`, oldest first (GET /logs?tail=&before=). */
export async function fetchOlderLogs(jobId: number, before: number, count = OLDER_PAGE): Promise<LogEvent[]> {
  const page = await api.get<EventPage<LogEvent>>(`/api/jobs/${jobId}/logs?tail=${count}&before=${before}`)
  return page.events
}
