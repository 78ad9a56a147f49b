import { Link, useParams } from 'react-router-dom'
import { QueryError } from '../../../components/QueryError'
import { isApiError } from '../../../lib/api'
import { JobTopology } from '../../topology/components/JobTopology'
import { useJob } from '../api/get-job'
import { useJobEvents } from '../api/job-events'
import { useJobStream } from '../hooks/useJobStream'
import { ArtifactsPanel } from './ArtifactsPanel'
import { HealthPanel } from './HealthPanel'
import { JobHeader } from './JobHeader'
import { LogViewer } from './LogViewer'
import { MetricsPanel } from './MetricsPanel'
import { NodeCards } from './NodeCards'

export function JobDetailPage() {
  const { id } = useParams()
  const jobId = Number(id)
  if (!Number.isInteger(jobId) || jobId <= 0) return <NotAJob />
  // Keyed so that moving between jobs starts from a clean stream and state.
  return <JobDetail key={jobId} jobId={jobId} />
}

function NotAJob() {
  return (
    <div className="page-message">
      <p>No such job.</p>
      <Link to="/jobs">Back to jobs</Link>
    </div>
  )
}

function JobDetail({ jobId }: { jobId: number }) {
  const streamStatus = useJobStream(jobId)
  const job = useJob(jobId, { poll: streamStatus !== 'open' })
  const events = useJobEvents(jobId)

  if (job.isPending) return <p className="muted">Loading job…</p>
  if (job.isError) {
    if (isApiError(job.error) && job.error.status === 404) return <NotAJob />
    return <QueryError error={job.error} what={`job ${jobId}`} />
  }

  return (
    <div className="job-page">
      <JobHeader job={job.data} streamStatus={streamStatus} />
      <section className="panel" aria-label="Nodes">
        <header className="panel-header">
          <h2>Nodes</h2>
        </header>
        <NodeCards job={job.data} />
      </section>
      <JobTopology job={job.data} />
      <HealthPanel job={job.data} preflight={events.preflight} stalls={events.stalls} />
      <MetricsPanel metrics={events.metrics} checkpoints={events.checkpoints} />
      <LogViewer logs={events.logs} />
      <ArtifactsPanel job={job.data} />
    </div>
  )
}
