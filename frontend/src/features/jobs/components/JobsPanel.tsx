import { useState } from 'react'
import { useNavigate } from 'react-router-dom'
import { QueryError } from '../../../components/QueryError'
import { useJobs } from '../api/get-jobs'
import { JobsTable } from './JobsTable'
import { NewJobForm } from './NewJobForm'

export function JobsPanel() {
  const jobs = useJobs()
  const navigate = useNavigate()
  const [creating, setCreating] = useState(false)

  return (
    <section className="panel" aria-labelledby="jobs-title">
      <header className="panel-header">
        <h2 id="jobs-title">Jobs</h2>
        {jobs.data && <span className="muted">{jobs.data.length}</span>}
        <div className="spacer" />
        {!creating && (
          <button type="button" className="primary small" onClick={() => setCreating(true)}>
            New job
          </button>
        )}
      </header>
      {creating && (
        <NewJobForm onCancel={() => setCreating(false)} onCreated={(job) => navigate(`/jobs/${job.id}`)} />
      )}
      {jobs.isPending && <p className="muted">Loading…</p>}
      {jobs.isError && <QueryError error={jobs.error} what="jobs" onRetry={() => void jobs.refetch()} retrying={jobs.isFetching} />}
      {jobs.data && <JobsTable jobs={jobs.data} />}
    </section>
  )
}
