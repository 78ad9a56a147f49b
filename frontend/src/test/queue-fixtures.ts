import type { GoodputParts, GoodputRollup, GoodputRollupRow, Project, QueueEntry, Usage } from '../lib/types'

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

/** Seconds per goodput category, every one 0 unless given. */
export function goodputParts(overrides: Partial<GoodputParts> = {}): GoodputParts {
  return {
    queued: 0, preempted: 0, code_fetch: 0, environment_build: 0, launch: 0, training: 0, checkpoint: 0, recovery: 0,
    lost_work: 0, hang: 0, idle: 0, ...overrides,
  }
}

export function goodputRow(overrides: Partial<GoodputRollupRow> = {}): GoodputRollupRow {
  return {
    key: 'vision', jobs: 2, wall_seconds: 1000, goodput: 0.6,
    parts: goodputParts({ queued: 100, launch: 50, training: 600, checkpoint: 50, lost_work: 200 }),
    gpu_hours: 2, productive_gpu_hours: 1.5, cost: 6, wasted_cost: 1.5, ...overrides,
  }
}

export function goodputRollup(overrides: Partial<GoodputRollup> = {}): GoodputRollup {
  return {
    by: 'project', since: '2025-01-01T00:00:00Z', until: '2025-01-08T00:00:00Z',
    rows: [goodputRow(), goodputRow({ key: 'nlp', jobs: 1, wall_seconds: 100, goodput: 0, parts: goodputParts({ queued: 100 }),
      gpu_hours: 0, productive_gpu_hours: 0, cost: null, wasted_cost: null })],
    overall: goodputRow({ key: 'all', jobs: 3, wall_seconds: 1100, goodput: 600 / 1100,
      parts: goodputParts({ queued: 200, launch: 50, training: 600, checkpoint: 50, lost_work: 200 }) }),
    ...overrides,
  }
}
