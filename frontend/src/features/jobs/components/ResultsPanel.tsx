import { useId, useState } from 'react'
import { formatBytes } from '../../../lib/format'
import type { FunctionResult, JobDetail } from '../../../lib/types'
import { jobResultFileUrl, useJobResults } from '../api/get-job-results'
import { firstFailureRank } from '../function-results'

/** Characters of a repr shown before "Show all": about a line of the table. */
const REPR_PREVIEW_CHARS = 120

/**
 * A function job's results (torchyard.fn): each rank's return value (its repr, its pickle to
 * download) or what it raised, with the remote traceback. `seen` counts the result events streamed
 * so far: each one fetches the list again.
 */
export function ResultsPanel({ job, seen }: { job: JobDetail; seen: number }) {
  const results = useJobResults(job.id, job.status, seen)
  const list = results.data?.results ?? []
  const worldSize = results.data?.world_size ?? job.world_size
  const attempt = results.data?.attempt ?? job.attempt
  const firstFailure = firstFailureRank(list)
  return (
    <section className="panel" aria-label="Results">
      <header className="panel-header">
        <h2>Results</h2>
        <span className="muted small" aria-live="polite">
          {worldSize != null ? `${list.length} of ${worldSize} results` : `${list.length} results`}
          {attempt ? ` (attempt ${attempt})` : ''}
        </span>
      </header>
      {list.length === 0 ? (
        <p className="muted">{results.isError ? 'Results are unavailable.' : 'Results arrive as ranks return.'}</p>
      ) : (
        <table className="table results-table">
          <thead>
            <tr>
              <th>Rank</th>
              <th>Node</th>
              <th>Machine</th>
              <th>Result</th>
              <th>Pickle</th>
            </tr>
          </thead>
          {list.map((result) => (
            <ResultRows key={`${result.attempt}-${result.rank}`} jobId={job.id} result={result} firstFailure={result.rank === firstFailure} />
          ))}
        </table>
      )}
    </section>
  )
}

/** One rank: its row, and under a failed one its remote traceback (open for the first failure). */
function ResultRows({ jobId, result, firstFailure }: { jobId: number; result: FunctionResult; firstFailure: boolean }) {
  const [tracebackOpen, setTracebackOpen] = useState(firstFailure)
  // The cause can arrive after other ranks' results: open its traceback when it becomes the first.
  const [wasFirst, setWasFirst] = useState(firstFailure)
  if (firstFailure !== wasFirst) {
    setWasFirst(firstFailure)
    if (firstFailure) setTracebackOpen(true)
  }
  const tracebackId = useId()
  const failed = !result.ok
  return (
    <tbody className={firstFailure ? 'result-first-failure' : undefined}>
      <tr>
        <td className="num">{result.rank}</td>
        <td>{result.node_rank}</td>
        <td>{result.machine || '—'}</td>
        <td className="result-cell">
          {failed ? (
            <div className="result-error">
              {firstFailure && <span className="result-tag result-tag-first">first failure</span>}
              {result.peer_failure && <span className="result-tag result-tag-peer">peer went away</span>}
              <span className="text-bad mono">
                {result.error_type || 'Error'}
                {result.error ? `: ${result.error}` : ''}
              </span>
              {result.traceback && (
                <button
                  type="button"
                  className="small"
                  aria-expanded={tracebackOpen}
                  aria-controls={tracebackId}
                  aria-label={`${tracebackOpen ? 'Hide' : 'Show'} traceback of rank ${result.rank}`}
                  onClick={() => setTracebackOpen((open) => !open)}
                >
                  {tracebackOpen ? 'Hide traceback' : 'Show traceback'}
                </button>
              )}
            </div>
          ) : (
            <Repr rank={result.rank} text={result.repr} />
          )}
        </td>
        <td>
          {result.has_value ? (
            <a
              href={jobResultFileUrl(jobId, result.rank)}
              download={`rank-${result.rank}.pkl`}
              className="mono"
              title={`${formatBytes(result.size)}, sha256 ${result.sha256}`}
            >
              rank-{result.rank}.pkl
            </a>
          ) : (
            <span className="muted">—</span>
          )}
        </td>
      </tr>
      {failed && result.traceback && (
        <tr className="result-traceback-row" hidden={!tracebackOpen}>
          <td colSpan={5}>
            <pre id={tracebackId} className="result-traceback mono" aria-label={`Traceback of rank ${result.rank}`}>
              {result.traceback}
            </pre>
          </td>
        </tr>
      )}
    </tbody>
  )
}

/** A return value's repr, cut to a line with a toggle when it is longer. */
function Repr({ rank, text }: { rank: number; text: string }) {
  const [expanded, setExpanded] = useState(false)
  const id = useId()
  const firstLine = text.split('\n', 1)[0]
  const long = text.length > REPR_PREVIEW_CHARS || firstLine !== text
  if (!long) return <span className="mono result-repr">{text}</span>
  const preview = firstLine.length > REPR_PREVIEW_CHARS ? firstLine.slice(0, REPR_PREVIEW_CHARS) : firstLine
  return (
    <div className="result-repr-long">
      <span id={id} className={`mono result-repr${expanded ? ' result-repr-full' : ''}`}>
        {expanded ? text : `${preview}…`}
      </span>
      <button
        type="button"
        className="small"
        aria-expanded={expanded}
        aria-controls={id}
        aria-label={`${expanded ? 'Show less' : 'Show all'} of rank ${rank}'s value`}
        onClick={() => setExpanded((e) => !e)}
      >
        {expanded ? 'Show less' : 'Show all'}
      </button>
    </div>
  )
}
