import { useMe } from '../../auth/api/get-me'
import { useProjects } from '../api/get-projects'

/**
 * Whether the signed-in user may change a job's priority, as the server decides it
 * (projects/permissions.py `can_control_job`): staff, an admin of its project, or its owner while a
 * member. Undefined until both answers are in; the server still has the last word (403, or 400 above
 * the project's ceiling).
 */
export function useMayControlJob(): ((job: { owner: string; project: string }) => boolean) | undefined {
  const me = useMe().data
  const projects = useProjects().data
  if (!me || !projects) return undefined
  const roles = new Map(projects.map((p) => [p.name, p.role]))
  return (job) => {
    if (me.is_staff) return true
    const role = roles.get(job.project)
    return role === 'admin' || (job.owner === me.username && role === 'member')
  }
}
