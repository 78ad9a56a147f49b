import { Fragment, useState } from 'react'
import { PriorityBadge } from '../../../components/PriorityBadge'
import { QueryError } from '../../../components/QueryError'
import type { Project } from '../../../lib/types'
import { useMe } from '../../auth/api/get-me'
import { useProjects } from '../api/get-projects'
import '../projects.css'
import { ProjectSettingsForm } from './ProjectSettingsForm'

/** "3 of 8" against a quota, "3 (no limit)" without one; over it in red. */
function Held({ held, max }: { held: number; max: number | null }) {
  if (max == null) return <span>{held} <span className="muted">(no limit)</span></span>
  return <span className={held > max ? 'text-bad' : held === max ? 'strong' : undefined}>{held} of {max}</span>
}

function ProjectRow({ project, staff, editing, onEdit }: { project: Project; staff: boolean; editing: boolean; onEdit: (on: boolean) => void }) {
  return (
    <Fragment>
      <tr data-project={project.name}>
        <td>
          <div className="strong">{project.name}</div>
          {project.description && <div className="muted small project-description">{project.description}</div>}
        </td>
        <td className="muted">{project.role ?? '—'}</td>
        <td>
          <PriorityBadge priority={project.priority_ceiling} />
        </td>
        <td className="num" aria-label="GPUs held of quota">
          <Held held={project.held.gpus} max={project.max_gpus} />
        </td>
        <td className="num" aria-label="Processes held of quota">
          <Held held={project.held.processes} max={project.max_processes} />
        </td>
        <td>{project.borrow ? 'yes' : <span className="muted">no</span>}</td>
        <td className="actions">
          {project.role === 'admin' && !editing && (
            <button type="button" className="small" onClick={() => onEdit(true)} aria-label={`Edit ${project.name}`}>
              Edit
            </button>
          )}
        </td>
      </tr>
      {editing && (
        <tr className="row-form">
          <td colSpan={7}>
            <ProjectSettingsForm project={project} staff={staff} onDone={() => onEdit(false)} />
          </td>
        </tr>
      )}
    </Fragment>
  )
}

/**
 * The projects you belong to (staff: all): your role, the highest priority their jobs may have,
 * their quotas against what their running jobs hold now, and whether they may borrow idle capacity.
 * A project's admins change its ceiling here; staff also its quotas and borrowing.
 */
export function ProjectsPage() {
  const projects = useProjects({ refreshMs: 10_000 })
  const staff = useMe().data?.is_staff ?? false
  const [editing, setEditing] = useState<string | null>(null)

  return (
    <section className="panel" aria-labelledby="projects-title">
      <header className="panel-header">
        <h2 id="projects-title">Projects</h2>
        {projects.data && <span className="muted">{projects.data.length}</span>}
        <div className="spacer" />
        <span className="muted small">a quota caps what a project's running jobs hold at once; past it they wait, or borrow idle capacity</span>
      </header>
      {projects.isPending && <p className="muted">Loading…</p>}
      {projects.isError && <QueryError error={projects.error} what="projects" onRetry={() => void projects.refetch()} retrying={projects.isFetching} />}
      {projects.data && projects.data.length === 0 && <p className="empty">You are in no project yet.</p>}
      {projects.data && projects.data.length > 0 && (
        <table className="table projects-table" aria-label="Projects">
          <thead>
            <tr>
              <th>Project</th>
              <th>Your role</th>
              <th title="the highest priority its jobs may have">Priority ceiling</th>
              <th className="num" title="what its running jobs hold now, of its quota">
                GPUs
              </th>
              <th className="num" title="what its running jobs run now, of its quota">
                Processes
              </th>
              <th title="past its quota, jobs may start on idle capacity (the first to be preempted)">Borrowing</th>
              <th />
            </tr>
          </thead>
          <tbody>
            {projects.data.map((project) => (
              <ProjectRow
                key={project.id}
                project={project}
                staff={staff}
                editing={editing === project.name}
                onEdit={(on) => setEditing(on ? project.name : null)}
              />
            ))}
          </tbody>
        </table>
      )}
    </section>
  )
}
