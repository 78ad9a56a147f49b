import { queryOptions, skipToken, useQuery } from '@tanstack/react-query'
import type {
  CheckpointEvent,
  JobEvent,
  LogEvent,
  MetricEvent,
  PreflightEvent,
  StacksEvent,
  StalledEvent,
  StateEvent,
  StragglerEvent,
} from '../../../lib/types'

/**
 * Log lines kept in memory per job (the window the log view scrolls through); older ones drop off
 * the top and are paged back from GET /logs?before= when the user scrolls up to them.
 */
export const LOG_LINE_CAP = 20_000
/** Metric points kept per job (the chart thins them further when drawing). */
export const METRIC_POINT_CAP = 20_000

/**
 * A job's event stream as the page needs it. It lives in the query cache (no second store) and is
 * filled only by the WebSocket (`skipToken`: nothing to fetch); `lastId` is the resume cursor.
 */
export interface JobEventsState {
  lastId: number
  logs: LogEvent[]
  /**
   * Where older lines begin: every line with a greater or equal id is in `logs`, and below it some
   * are not (the stream opened on each rank's tail, or the window dropped its oldest). The log view
   * pages them from GET /logs?before=. Null when `logs` holds every line up to `lastId`.
   */
  olderBefore: number | null
  metrics: MetricEvent[]
  checkpoints: CheckpointEvent[]
  /** Every node's preflight result, all attempts (a few per attempt). */
  preflight: PreflightEvent[]
  stalls: StalledEvent[]
  /** Every node's answer to a "where is every rank now" request (`torchyard stacks`), the latest kept. */
  stacks: StacksEvent[]
  /** Stragglers named and cleared, all attempts. */
  stragglers: StragglerEvent[]
  /** Result events streamed so far (a function job's ranks returning): each refetches the results. */
  results: number
  /** Every job and node transition, all attempts: the page's timeline. */
  states: StateEvent[]
}

export const emptyJobEvents = (): JobEventsState => ({
  lastId: 0,
  logs: [],
  olderBefore: null,
  metrics: [],
  checkpoints: [],
  preflight: [],
  stalls: [],
  stacks: [],
  stragglers: [],
  results: 0,
  states: [],
})

/** Stall reports kept (each carries a stack of up to 16 kB). */
export const STALL_CAP = 50
/** Stacks answers kept: a node's each, of the last few requests. */
export const STACKS_CAP = 64
/** Straggler reports kept (two per straggler and attempt at most). */
export const STRAGGLER_CAP = 200
/** Transitions kept: a few per node and attempt, so only a job restarting for days reaches it. */
export const STATE_CAP = 5_000

export const jobEventsQueryKey = (id: number) => ['jobs', 'events', id] as const

export const jobEventsQueryOptions = (id: number) =>
  queryOptions({
    queryKey: jobEventsQueryKey(id),
    queryFn: skipToken,
    initialData: emptyJobEvents,
    staleTime: Infinity,
    // Every write is a new state built by mergeJobEvents (unchanged parts kept by reference):
    // comparing 20,000 lines deeply on each write is what structural sharing would cost.
    structuralSharing: false,
  })

const NO_EVENTS: JobEventsState = Object.freeze(emptyJobEvents())

export const useJobEvents = (id: number): JobEventsState => useQuery(jobEventsQueryOptions(id)).data ?? NO_EVENTS

const capped = <T>(items: T[], cap: number) => (items.length > cap ? items.slice(items.length - cap) : items)

/** New lines after the window; past LOG_LINE_CAP its oldest drop off and older history begins higher. */
function appendLogs(state: JobEventsState, logs: LogEvent[]): Pick<JobEventsState, 'logs' | 'olderBefore'> {
  const all = [...state.logs, ...logs]
  if (all.length <= LOG_LINE_CAP) return { logs: all, olderBefore: state.olderBefore }
  const kept = all.slice(all.length - LOG_LINE_CAP)
  return { logs: kept, olderBefore: Math.max(state.olderBefore ?? 0, kept[0].id) }
}

export function withOlderLines(state: JobEventsState, logsBefore: number | null): JobEventsState {
  if (logsBefore === null || (state.olderBefore ?? 0) >= logsBefore) return state
  return { ...state, olderBefore: logsBefore }
}

/**
 * Appends a batch. Ids increase per job and the server replays strictly after the cursor, so any
 * id at or below `lastId` is a duplicate (a replay overlapping what we already have) and dropped.
 */
export function mergeJobEvents(state: JobEventsState, events: JobEvent[]): JobEventsState {
  let lastId = state.lastId
  const logs: LogEvent[] = []
  const metrics: MetricEvent[] = []
  const checkpoints: CheckpointEvent[] = []
  const preflight: PreflightEvent[] = []
  const stalls: StalledEvent[] = []
  const stacks: StacksEvent[] = []
  const stragglers: StragglerEvent[] = []
  const states: StateEvent[] = []
  let results = 0
  for (const event of events) {
    if (event.id <= lastId) continue
    lastId = event.id
    if (event.type === 'log') logs.push(event)
    else if (event.type === 'metric') metrics.push(event)
    else if (event.type === 'checkpoint') checkpoints.push(event)
    else if (event.type === 'preflight') preflight.push(event)
    else if (event.type === 'stalled') stalls.push(event)
    else if (event.type === 'stacks') stacks.push(event)
    else if (event.type === 'straggler') stragglers.push(event)
    else if (event.type === 'state') states.push(event)
    else if (event.type === 'result') results += 1
  }
  if (lastId === state.lastId) return state
  const logWindow = logs.length ? appendLogs(state, logs) : state
  return {
    lastId,
    logs: logWindow.logs,
    olderBefore: logWindow.olderBefore,
    metrics: metrics.length ? capped(supersede([...state.metrics, ...metrics]), METRIC_POINT_CAP) : state.metrics,
    checkpoints: checkpoints.length ? [...state.checkpoints, ...checkpoints] : state.checkpoints,
    preflight: preflight.length ? [...state.preflight, ...preflight] : state.preflight,
    stalls: stalls.length ? capped([...state.stalls, ...stalls], STALL_CAP) : state.stalls,
    stacks: stacks.length ? capped([...state.stacks, ...stacks], STACKS_CAP) : state.stacks,
    stragglers: stragglers.length ? capped([...state.stragglers, ...stragglers], STRAGGLER_CAP) : state.stragglers,
    results: state.results + results,
    states: states.length ? capped([...state.states, ...states], STATE_CAP) : state.states,
  }
}

/**
 * A recovery relaunch resumes from its checkpoint and redoes the steps after it: from the first step
 * a newer attempt reports, its points replace the older attempts', so curves never run backwards.
 */
export function supersede(metrics: MetricEvent[]): MetricEvent[] {
  const firstStep = new Map<number, number>()
  for (const m of metrics) {
    const attempt = m.attempt ?? 0
    const step = m.step ?? 0
    const seen = firstStep.get(attempt)
    if (seen === undefined || step < seen) firstStep.set(attempt, step)
  }
  if (firstStep.size < 2) return metrics
  return metrics.filter((m) => {
    const attempt = m.attempt ?? 0
    const step = m.step ?? 0
    for (const [later, from] of firstStep) if (later > attempt && step >= from) return false
    return true
  })
}
