import { useMutation, useQueryClient } from '@tanstack/react-query'
import { api, dataOf } from '../../../lib/api'
import type { Project, ProjectSettings } from '../../../lib/types'
import { projectsQueryKey } from './get-projects'

export const updateProject = ({ name, settings }: { name: string; settings: ProjectSettings }) =>
  dataOf(api.PATCH('/api/projects/{name}', { params: { path: { name } }, body: settings }))

export const useUpdateProject = () => {
  const queryClient = useQueryClient()
  return useMutation({
    mutationFn: updateProject,
    onSuccess: (project) => {
      queryClient.setQueryData<Project[]>(projectsQueryKey, (old) => old?.map((p) => (p.id === project.id ? project : p)))
    },
  })
}
