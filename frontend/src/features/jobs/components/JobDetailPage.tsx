import { Link, useParams } from 'react-router-dom'
import { QueryError } from '../../../components/QueryError'
import { isApiError } from '../../../lib/api'
import { useJob } from '../api/get-job'
import { useJobEvents } from '../api/job-events'
import { useJobStream } from '../hooks/useJobStream'
import '../job-page.css'
import { ArtifactsPanel } from './ArtifactsPanel'
import { CheckpointsPanel } from './CheckpointsPanel'
import { GoodputPanel } from './GoodputPanel'
import { HealthPanel } from './HealthPanel'
import { LinksPanel } from './LinksPanel'
import { StacksPanel } from './StacksPanel'
import { StragglersPanel } from './StragglersPanel'
import { JobHeader } from './JobHeader'
import { JobTopology } from './JobTopology'
import { LogViewer } from './LogViewer'
import { MetricsPanel } from './MetricsPanel'
import { NodeCards } from './NodeCards'
import { ResultsPanel } from './ResultsPanel'
import { StateTimeline } from './StateTimeline'

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
    return <QueryError error={job.error} what={`job ${jobId}`} onRetry={() => void job.refetch()} retrying={job.isFetching} />
  }

  return (
    <div className="job-page">
      {streamStatus === 'reconnecting' && (
        <div className="reconnecting" role="status">
          Reconnecting to the live stream… it resumes after event #{events.lastId}, no line is lost.
        </div>
      )}
      <JobHeader job={job.data} streamStatus={streamStatus} />
      <section className="panel" aria-label="Nodes">
        <header className="panel-header">
          <h2>Nodes</h2>
        </header>
        <NodeCards job={job.data} />
      </section>
      {/* A function job's output is its ranks' return values; a script's are its files below. */}
      {job.data.spec.function && <ResultsPanel job={job.data} seen={events.results} />}
      <JobTopology job={job.data} />
      <HealthPanel job={job.data} preflight={events.preflight} stalls={events.stalls} />
      <StragglersPanel job={job.data} events={events.stragglers} />
      <LinksPanel job={job.data} />
      <StacksPanel job={job.data} stacks={events.stacks} />
      <MetricsPanel jobId={jobId} metrics={events.metrics} states={events.states} />
      <LogViewer jobId={jobId} logs={events.logs} olderBefore={events.olderBefore} />
      <StateTimeline states={events.states} stalls={events.stalls} />
      <GoodputPanel jobId={jobId} seen={events.states.length} />
      <div className="job-files">
        <CheckpointsPanel jobId={jobId} seen={events.checkpoints.length} />
        <ArtifactsPanel job={job.data} />
      </div>
    </div>
  )
}
