import { Link, useNavigate } from 'react-router-dom'
import { PriorityBadge } from '../../../components/PriorityBadge'
import { ProgressBar } from '../../../components/ProgressBar'
import { RelativeTime } from '../../../components/RelativeTime'
import { StatusBadge } from '../../../components/StatusBadge'
import { formatNumber } from '../../../lib/format'
import type { JobSummary } from '../../../lib/types'

export function JobsTable({ jobs }: { jobs: JobSummary[] }) {
  const navigate = useNavigate()
  if (jobs.length === 0) return <p className="empty">No jobs yet.</p>
  return (
    <table className="table table-clickable">
      <thead>
        <tr>
          <th className="num">ID</th>
          <th>Name</th>
          <th>Project</th>
          <th>Status</th>
          <th className="num">World</th>
          <th className="num">Attempt</th>
          <th>Progress</th>
          <th className="num">Throughput</th>
          <th>Created</th>
        </tr>
      </thead>
      <tbody>
        {jobs.map((job) => (
          <tr key={job.id} onClick={() => navigate(`/jobs/${job.id}`)}>
            <td className="num mono">
              <Link to={`/jobs/${job.id}`} onClick={(e) => e.stopPropagation()}>
                {job.id}
              </Link>
            </td>
            <td className="strong">
              <Link to={`/jobs/${job.id}`} onClick={(e) => e.stopPropagation()}>
                {job.name}
              </Link>
              {/* Only a priority other than normal is worth a badge. */}
              {job.priority ? (
                <>
                  {' '}
                  <PriorityBadge priority={job.priority} />
                </>
              ) : null}
            </td>
            <td className="muted">{job.project}</td>
            <td>
              <StatusBadge status={job.status} title={job.status_reason || undefined} />
              {job.borrowing && (
                <>
                  {' '}
                  <span className="tag tag-borrowing" title="runs on capacity borrowed past its project's quota: the first to be preempted">
                    borrowing
                  </span>
                </>
              )}
            </td>
            <td className="num">{job.world_size ?? '—'}</td>
            <td className="num">{job.attempt}</td>
            <td className="cell-progress">
              <ProgressBar value={job.progress.step} max={job.progress.total_steps} />
            </td>
            <td className="num">{job.progress.throughput == null ? '—' : `${formatNumber(job.progress.throughput, 1)}/s`}</td>
            <td className="muted">
              <RelativeTime iso={job.created_at} intervalMs={30_000} />
            </td>
          </tr>
        ))}
      </tbody>
    </table>
  )
}
