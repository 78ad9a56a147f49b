import { formatBytes, formatDateTime, formatDuration } from '../../../lib/format'
import { checkpointFileUrl, useCheckpoints } from '../api/get-checkpoints'

/** A save's seconds to the hundredth (a blocking copy is a fraction of a second); '—' when unknown. */
function formatSaveSeconds(seconds: number | null | undefined): string {
  if (seconds == null || Number.isNaN(seconds)) return '—'
  return seconds < 60 ? `${seconds.toFixed(2)} s` : formatDuration(seconds)
}

/**
 * The job's committed checkpoints, newest first, every file downloadable, with what each save cost
 * the training loop: how long it was blocked, and (async saves) how long the rest ran beside it.
 */
export function CheckpointsPanel({ jobId, seen }: { jobId: number; seen: number }) {
  const checkpoints = useCheckpoints(jobId, seen)
  const list = (checkpoints.data ?? []).slice().sort((a, b) => b.id - a.id)
  return (
    <section className="panel" aria-label="Checkpoints">
      <header className="panel-header">
        <h2>Checkpoints</h2>
        <span className="muted small">{list.length ? `${list.length} committed` : ''}</span>
      </header>
      {list.length === 0 ? (
        <p className="muted">{checkpoints.isError ? 'Checkpoints are unavailable.' : 'No checkpoint yet.'}</p>
      ) : (
        <table className="table">
          <thead>
            <tr>
              <th>Step</th>
              <th>Attempt</th>
              <th title="The store (disk/S3), or the memory of the machines that hold it (checkpointing.memory)">Kept in</th>
              <th>Committed</th>
              <th>Size</th>
              <th title="How long save() held the training loop (the slowest rank)">Blocked</th>
              <th title="Async saves: writing, hashing and committing while training went on">Background</th>
              <th>Files</th>
            </tr>
          </thead>
          <tbody>
            {list.map((c) => (
              <tr key={c.id} className={c.verified ? undefined : 'text-bad'}>
                <td>
                  {c.step}
                  {c.verified ? '' : ' (corrupt)'}
                </td>
                <td>{c.attempt}</td>
                <td>{c.tier === 'memory' ? `memory: ${memoryHolders(c.files).join(', ')}` : 'store'}</td>
                <td>{formatDateTime(c.committed_at)}</td>
                <td>{formatBytes(c.total_bytes)}</td>
                <td>{formatSaveSeconds(c.blocking_seconds)}</td>
                <td>{c.saved_async ? formatSaveSeconds(c.background_seconds) : c.blocking_seconds == null ? '—' : 'sync'}</td>
                <td className="mono checkpoint-files">
                  {c.files.map((f) =>
                    c.tier === 'memory' ? (
                      <span key={f.path} title="held in the agents' memory: nothing to download">
                        {f.path}
                      </span>
                    ) : (
                      <a key={f.path} href={checkpointFileUrl(jobId, c.id, f.path)} download>
                        {f.path}
                      </a>
                    ),
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  )
}

/** The machines holding every file of a memory checkpoint, in the order the first file names them. */
function memoryHolders(files: { holders?: string[] }[]): string[] {
  const [first, ...rest] = files
  return (first?.holders ?? []).filter((m) => rest.every((f) => f.holders?.includes(m)))
}
