import { Field } from '../../../components/Field'
import { QueryError } from '../../../components/QueryError'
import { usePlugins, type Plugin } from '../api/get-plugins'
import { withPlugin, type NewJobFormState } from '../new-job-spec'

interface Props {
  form: NewJobFormState
  errors: Record<string, string[]>
  onChange: (patch: Partial<NewJobFormState>) => void
}

const labelOf = (plugin: Plugin) =>
  [plugin.name, plugin.version && `v${plugin.version}`, plugin.builtin && '(built-in)'].filter(Boolean).join(' ')

/**
 * The plugins a job may run (TransformerLab's: uploaded ones and the built-in recipes). Picking one fills
 * the entrypoint and its default config; until the list arrives (NewJobForm then picks the default
 * recipe) the entrypoint the form holds stands alone.
 */
export function PluginPicker({ form, errors, onChange }: Props) {
  const plugins = usePlugins()
  const list = plugins.data ?? []
  const chosen = list.find((p) => p.name === form.plugin)
  const pick = (name: string) => {
    const plugin = list.find((p) => p.name === name)
    if (plugin) onChange(withPlugin(form, plugin))
  }
  return (
    <>
      <Field label="Plugin" errors={errors.entrypoint}>
        <select name="plugin" value={chosen?.name ?? ''} onChange={(e) => pick(e.target.value)} disabled={!list.length}>
          {!chosen && <option value="">{form.entrypoint}</option>}
          {list.map((p) => (
            <option key={p.name} value={p.name} title={p.description}>
              {labelOf(p)}
            </option>
          ))}
        </select>
      </Field>
      {plugins.isError && (
        <QueryError error={plugins.error} what="plugins" onRetry={() => void plugins.refetch()} retrying={plugins.isFetching} />
      )}
      {chosen && (
        <p className="form-hint plugin-hint">
          {chosen.description && <span>{chosen.description} </span>}
          <span className="muted">
            runs <code>{chosen.entrypoint}</code>
            {chosen.bundle && ` from bundle ${chosen.bundle.slice(0, 12)}`}
          </span>
        </p>
      )}
    </>
  )
}
