import type { Project, QueueEntry, Usage } from '../lib/types'

/** A queued job as GET /api/queue lists it: first in line, waiting for room. */
export function queueEntry(overrides: Partial<QueueEntry> = {}): QueueEntry {
  return {
    id: 7,
    name: 'resnet-big',
    project: 'vision',
    owner: 'ada',
    status: 'queued',
    priority: 0,
    position: 1,
    reason: 'waiting for 2 machines with room for 2 more processes each; 0 have it',
    blocked_by: 'resources',
    head: false,
    borrowing: false,
    backfill: false,
    expected_start: null,
    submitted_at: '2025-01-01T10:00:00Z',
    waiting_since: '2025-01-01T10:00:00Z',
    gpus: 0,
    processes: 4,
    ...overrides,
  }
}

/** A project as GET /api/projects lists it, with the caller's role. */
export function project(overrides: Partial<Project> = {}): Project {
  return {
    id: 1,
    name: 'vision',
    description: '',
    created_at: '2025-01-01T09:00:00Z',
    role: 'member',
    priority_ceiling: 10,
    max_gpus: null,
    max_processes: null,
    borrow: false,
    held: { gpus: 0, processes: 0 },
    ...overrides,
  }
}

/** GET /api/usage?by=project&since=7d&bucket=day: two projects over three days. */
export function usage(overrides: Partial<Usage> = {}): Usage {
  return {
    by: 'project',
    since: '2025-01-01T00:00:00Z',
    until: '2025-01-03T12:00:00Z',
    bucket: 'day',
    totals: [
      { key: 'vision', gpu_seconds: 36_000, gpu_hours: 10, process_seconds: 72_000, process_hours: 20, nodes: 3 },
      { key: 'nlp', gpu_seconds: 0, gpu_hours: 0, process_seconds: 90, process_hours: 0.025, nodes: 1 },
    ],
    buckets: ['2025-01-01T00:00:00Z', '2025-01-02T00:00:00Z', '2025-01-03T00:00:00Z'],
    series: [
      { key: 'vision', gpu_hours: [4, 6, 0], process_hours: [8, 12, 0] },
      { key: 'nlp', gpu_hours: [0, 0, 0], process_hours: [0, 0, 0.025] },
    ],
    ...overrides,
  }
}
