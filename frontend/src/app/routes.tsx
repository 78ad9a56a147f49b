import { Link, Route, Routes } from 'react-router-dom'
import { LoginPage } from '../features/auth/components/LoginPage'
import { RequireAuth } from '../features/auth/components/RequireAuth'
import { ExperimentsPage } from '../features/experiments/components/ExperimentsPage'
import { SweepDetailPage } from '../features/sweeps/components/SweepDetailPage'
import { SweepsPage } from '../features/sweeps/components/SweepsPage'
import { JobDetailPage } from '../features/jobs/components/JobDetailPage'
import { JobsPanel } from '../features/jobs/components/JobsPanel'
import { MachinesPanel } from '../features/machines/components/MachinesPanel'
import { ProjectsPage } from '../features/projects/components/ProjectsPage'
import { QueuePage } from '../features/queue/components/QueuePage'
import { TokensPage } from '../features/tokens/components/TokensPage'
import { TopologyPage } from '../features/topology/components/TopologyPage'
import { UsagePage } from '../features/usage/components/UsagePage'
import { AppLayout } from './AppLayout'

function OverviewPage() {
  return (
    <div className="overview">
      <MachinesPanel />
      <JobsPanel />
    </div>
  )
}

function NotFound() {
  return (
    <div className="page-message">
      <p>Nothing here.</p>
      <Link to="/">Back to the overview</Link>
    </div>
  )
}

export function AppRoutes() {
  return (
    <Routes>
      <Route path="/login" element={<LoginPage />} />
      <Route element={<RequireAuth />}>
        <Route element={<AppLayout />}>
          <Route index element={<OverviewPage />} />
          <Route path="machines" element={<MachinesPanel />} />
          <Route path="jobs" element={<JobsPanel />} />
          <Route path="jobs/:id" element={<JobDetailPage />} />
          <Route path="queue" element={<QueuePage />} />
          <Route path="usage" element={<UsagePage />} />
          <Route path="projects" element={<ProjectsPage />} />
          <Route path="experiments" element={<ExperimentsPage />} />
          <Route path="sweeps" element={<SweepsPage />} />
          <Route path="sweeps/:id" element={<SweepDetailPage />} />
          <Route path="tokens" element={<TokensPage />} />
          <Route path="topology" element={<TopologyPage />} />
          <Route path="*" element={<NotFound />} />
        </Route>
      </Route>
    </Routes>
  )
}
