import { ErrorWithRetry } from '../../../components/ErrorWithRetry'
import { PriorityBadge } from '../../../components/PriorityBadge'
import { ProgressBar } from '../../../components/ProgressBar'
import { StatusBadge } from '../../../components/StatusBadge'
import { formatDateTime, formatDuration } from '../../../lib/format'
import { LIVE_JOB_STATUSES, PREEMPTED, WAITING_JOB_STATUSES, type JobDetail } from '../../../lib/types'
import { useState } from 'react'
import { Link } from 'react-router-dom'
import { useStopJob } from '../api/stop-job'
import type { JobStreamStatus } from '../hooks/useJobStream'
import { PriorityControl } from './PriorityControl'

export function JobHeader({ job, streamStatus }: { job: JobDetail; streamStatus: JobStreamStatus }) {
  const stop = useStopJob()
  // A job already stopping still changes, but is asked nothing more.
  const live = LIVE_JOB_STATUSES.includes(job.status) && job.status !== 'stopping'

  const [confirming, setConfirming] = useState(false)
  const running = job.nodes.filter((n) => n.attempt === job.attempt).length

  return (
    <header className="job-header panel">
      <div className="job-title-row">
        <h1>
          <span className="muted mono">#{job.id}</span> {job.name}
        </h1>
        <StatusBadge status={job.status} />
        {job.priority ? <PriorityBadge priority={job.priority} /> : null}
        {job.borrowing && (
          <span className="tag tag-borrowing" title="runs on capacity borrowed past its project's quota: the first to be preempted">
            borrowing
          </span>
        )}
        <span className={`stream-dot stream-${streamStatus}`} title={`Live stream: ${streamStatus}`} />
        <div className="spacer" />
        {job.spec.framework === 'ray' && (job.status === 'running' || job.status === 'dispatching') && (
          // Proxied by the server (sign-in and the job's permissions); the dashboard itself is not open.
          <a href={`/api/jobs/${job.id}/ray/`} target="_blank" rel="noreferrer">
            Ray dashboard
          </a>
        )}
        {live && !confirming && (
          <button type="button" className="danger" onClick={() => setConfirming(true)} disabled={stop.isPending}>
            {stop.isPending ? 'Stopping…' : 'Stop all nodes…'}
          </button>
        )}
      </div>
      {live && confirming && (
        <div className="stop-confirm" role="alertdialog" aria-label="Confirm stop" aria-describedby="stop-confirm-text">
          <span id="stop-confirm-text">
            Stop job #{job.id} "{job.name}"? Every one of its {running || ''} node{running === 1 ? '' : 's'} is stopped; the job
            ends as stopped and is not recovered.
          </span>
          <button
            type="button"
            className="danger"
            // The dialog opens from the keyboard too: focus lands on the choice to make.
            autoFocus
            onClick={() => {
              setConfirming(false)
              stop.mutate(job.id)
            }}
          >
            Stop all nodes
          </button>
          <button type="button" onClick={() => setConfirming(false)}>
            Cancel
          </button>
        </div>
      )}
      {job.status === 'failed' && job.status_reason && (
        <p className="status-reason" role="alert">
          {job.status_reason}
        </p>
      )}
      {WAITING_JOB_STATUSES.includes(job.status) && (
        <p className={job.status === PREEMPTED ? 'status-note status-note-preempted' : 'status-note'}>
          {job.status === PREEMPTED ? 'Preempted, back in the queue' : 'Waiting in the queue'}
          {job.status_reason ? `: ${job.status_reason}` : ''} <Link to="/queue">See the queue</Link>
        </p>
      )}
      {stop.isError && (
        <ErrorWithRetry error={stop.error} onRetry={() => stop.mutate(job.id)} retrying={stop.isPending}>
          Could not stop the job:{' '}
        </ErrorWithRetry>
      )}
      <dl className="facts">
        <div>
          <dt>World size</dt>
          <dd>{job.world_size ?? '—'}</dd>
        </div>
        <div>
          <dt>Attempt</dt>
          <dd>
            {job.attempt}
            {/* Attempts also restart after a preemption, which is no recovery: `restarts` counts those. */}
            {job.restarts ? <span className="muted"> ({job.restarts} {job.restarts === 1 ? 'recovery' : 'recoveries'})</span> : null}
          </dd>
        </div>
        <div>
          <dt>Master</dt>
          <dd className="mono">{job.master_addr ? `${job.master_addr}:${job.master_port ?? '—'}` : '—'}</dd>
        </div>
        {job.spec.function ? (
          <div>
            <dt>Function</dt>
            <dd className="mono" title={`pickled function and arguments: bundle ${job.spec.function.payload}`}>
              fn {job.spec.function.name} · Python {job.spec.function.python}
            </dd>
          </div>
        ) : (
          <div>
            <dt>Entrypoint</dt>
            <dd className="mono" title={job.spec.code ? `code bundle ${job.spec.code.bundle}` : 'built-in recipe'}>
              {job.spec.module ? `-m ${job.spec.module}` : job.spec.entrypoint}
              {job.spec.code ? ` (bundle ${job.spec.code.bundle.slice(0, 12)})` : ''}
            </dd>
          </div>
        )}
        <div>
          <dt>Project</dt>
          <dd>{job.project}</dd>
        </div>
        <div>
          <dt>Owner</dt>
          <dd>{job.owner}</dd>
        </div>
        <div>
          <dt>Priority</dt>
          <dd>{live ? <PriorityControl job={job} /> : <PriorityBadge priority={job.priority} />}</dd>
        </div>
        <div>
          <dt>Created</dt>
          <dd>{formatDateTime(job.created_at)}</dd>
        </div>
        <div>
          <dt>ETA</dt>
          <dd>{live ? formatDuration(job.progress.eta_seconds) : '—'}</dd>
        </div>
        <div className="fact-wide">
          <dt>Progress</dt>
          <dd>
            <ProgressBar value={job.progress.step} max={job.progress.total_steps} />
          </dd>
        </div>
      </dl>
      {job.plan?.warnings.length ? (
        <ul className="warnings">
          {job.plan.warnings.map((w) => (
            <li key={w}>{w}</li>
          ))}
        </ul>
      ) : null}
    </header>
  )
}
