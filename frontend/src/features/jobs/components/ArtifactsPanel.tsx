import { formatBytes } from '../../../lib/format'
import type { JobDetail } from '../../../lib/types'
import { useArtifacts } from '../api/get-artifacts'

/** What the job's nodes wrote under $TORCHYARD_OUTPUT_DIR, each file downloadable, or all as a zip. */
export function ArtifactsPanel({ job }: { job: JobDetail }) {
  const artifacts = useArtifacts(job.id, job.status)
  const files = artifacts.data ?? []
  return (
    <section className="panel" aria-label="Outputs">
      <header className="panel-header">
        <h2>Outputs</h2>
        {files.length > 0 && (
          <a href={`/api/jobs/${job.id}/artifacts/archive`} download>
            Download all (zip)
          </a>
        )}
      </header>
      {files.length === 0 ? (
        <p className="muted">
          {artifacts.isError ? 'Outputs are unavailable.' : 'No outputs yet: nodes collect $TORCHYARD_OUTPUT_DIR when they end.'}
        </p>
      ) : (
        <table className="table">
          <thead>
            <tr>
              <th>File</th>
              <th>Node</th>
              <th>Attempt</th>
              <th>Size</th>
              <th>sha256</th>
            </tr>
          </thead>
          <tbody>
            {files.map((file) => (
              <tr key={file.id}>
                <td className="mono">
                  <a href={`/api/jobs/${job.id}/artifacts/${file.id}`} download>
                    {file.path}
                  </a>
                </td>
                <td>{file.node_rank}</td>
                <td>{file.attempt}</td>
                <td>{formatBytes(file.size)}</td>
                <td className="mono" title={file.sha256}>
                  {file.sha256.slice(0, 12)}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  )
}
