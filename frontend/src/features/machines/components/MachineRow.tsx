import { useEffect, useRef, useState } from 'react'
import { ErrorWithRetry } from '../../../components/ErrorWithRetry'
import { RelativeTime } from '../../../components/RelativeTime'
import { StatusBadge } from '../../../components/StatusBadge'
import { isApiError } from '../../../lib/api'
import { formatDateTime } from '../../../lib/format'
import type { Machine } from '../../../lib/types'
import { useDeleteMachine } from '../api/delete-machine'
import { usePingMachine } from '../api/ping-machine'
import { useReleaseMachine, useSetMachineDrain, useSetMachineVolumes } from '../api/update-machine'
import { LoadBars } from './LoadBars'
import {
  gpuDeclaration,
  gpuSummary,
  hostAndPort,
  hostSummary,
  interfaceLines,
  parseVolumesText,
  roundTripText,
  usageSummary,
  versionsOf,
  volumeSummary,
  volumesText,
  type RoundTrip,
} from '../../../lib/machine-summary'

export const MACHINE_COLUMNS = 8

interface MachineRowProps {
  machine: Machine
  /** Staff: drain and remove (everyone signed in may ping). */
  canManage: boolean
  roundTrip: RoundTrip | undefined
  checking: boolean
  onRoundTrip: (id: number, result: RoundTrip) => void
}

export function MachineRow({ machine: m, canManage, roundTrip, checking, onRoundTrip }: MachineRowProps) {
  const ping = usePingMachine()
  const drain = useSetMachineDrain()
  const release = useReleaseMachine()
  const [confirming, setConfirming] = useState(false)
  const [editingVolumes, setEditingVolumes] = useState(false)
  const removeButton = useRef<HTMLButtonElement>(null)
  const labels = Object.entries(m.labels)
  const interfaces = interfaceLines(m)
  const error = ping.error ?? drain.error ?? release.error

  const onPing = () =>
    ping.mutate(m.id, {
      onSuccess: (result) => onRoundTrip(m.id, { reachable: result.reachable, rtt_ms: result.rtt_ms, timeout_s: result.timeout_s }),
    })

  const closeConfirm = () => {
    setConfirming(false)
    removeButton.current?.focus()
  }

  return (
    <>
      <tr aria-label={m.name}>
        <td className="machine-cell">
          <div className="strong" title={m.name}>
            {m.name}
          </div>
          {/* The address the other nodes reach it at, and the port TransformerLab's machine list records beside it
              (the agent dials out and listens on no port of its own). */}
          <div className="mono muted" title={hostAndPort(m)}>
            {hostAndPort(m)}
          </div>
          {labels.length > 0 && (
            <ul className="labels" aria-label="Labels">
              {labels.map(([key, value]) => (
                <li key={key} className="label-chip">
                  {value ? `${key}=${value}` : key}
                </li>
              ))}
            </ul>
          )}
          {(m.volumes ?? []).length > 0 && (
            <ul className="labels" aria-label="Volumes">
              {(m.volumes ?? []).map((v) => (
                <li
                  key={v.name}
                  className={`label-chip${v.exists === false ? ' text-bad' : ''}`}
                  title={v.source === 'agent' ? 'declared by its agent (--volume)' : 'declared on the server'}
                >
                  {volumeSummary(v)}
                </li>
              ))}
            </ul>
          )}
        </td>
        <td>
          <StatusBadge status={m.status} title={m.drained ? 'drained: no new nodes are placed here' : undefined} />
        </td>
        <td title={versionsOf(m) || undefined}>
          <div>{hostSummary(m)}</div>
          <div className="muted">{gpuSummary(m)}</div>
          {gpuDeclaration(m) && (
            <div className="muted" title="torchyard agent --gpus: only these GPUs are scheduled, as declared">
              {gpuDeclaration(m)}
            </div>
          )}
          {interfaces.length > 0 && (
            <ul className="interfaces" aria-label="Interfaces">
              {interfaces.map((line) => (
                <li key={line.name} className={line.measured ? undefined : 'muted'}>
                  {line.text}
                </li>
              ))}
            </ul>
          )}
          {(m.capabilities.gpu_warnings ?? []).length > 0 && (
            <ul className="gpu-warnings" aria-label="GPU warnings">
              {(m.capabilities.gpu_warnings ?? []).map((warning) => (
                <li key={warning} className="text-bad">
                  {warning}
                </li>
              ))}
            </ul>
          )}
        </td>
        <td>
          <LoadBars machine={m} />
        </td>
        <td className="wrap">{usageSummary(m)}</td>
        <td className="num muted">
          <RelativeTime iso={m.last_heartbeat} />
        </td>
        <td className="num" aria-label="Round trip">
          <RoundTripCell result={roundTrip} pending={ping.isPending || checking} />
        </td>
        <td className="actions">
          <div className="row-actions">
            <button type="button" className="small" onClick={onPing} disabled={ping.isPending} aria-label={`Ping ${m.name}`}>
              Ping
            </button>
            {canManage && (
              <>
                {m.quarantined_at && (
                  <button
                    type="button"
                    className="small"
                    disabled={release.isPending}
                    onClick={() => release.mutate(m.id)}
                    aria-label={`Release ${m.name}`}
                    title="End the quarantine: nodes may be placed here again"
                  >
                    Release
                  </button>
                )}
                <button
                  type="button"
                  className="small drain-button"
                  disabled={drain.isPending}
                  onClick={() => drain.mutate({ id: m.id, status: m.drained ? 'online' : 'draining' })}
                  aria-label={`${m.drained ? 'Undrain' : 'Drain'} ${m.name}`}
                  title={m.drained ? 'Take new nodes again' : 'Place no new nodes here; running ones go on'}
                >
                  {m.drained ? 'Undrain' : 'Drain'}
                </button>
                <button
                  type="button"
                  className="small"
                  onClick={() => setEditingVolumes(true)}
                  aria-label={`Volumes of ${m.name}`}
                  title="Named host paths jobs may ask for"
                >
                  Volumes
                </button>
                <button
                  ref={removeButton}
                  type="button"
                  className="danger small"
                  onClick={() => setConfirming(true)}
                  aria-label={`Remove ${m.name}`}
                >
                  Remove
                </button>
              </>
            )}
          </div>
        </td>
      </tr>
      {m.quarantined_at && (
        <tr className="row-message">
          <td colSpan={MACHINE_COLUMNS}>
            <div className="quarantine" aria-label="Quarantine">
              <span className="text-bad">Quarantined: {m.quarantine_reason || 'a hang named it'}</span>
              <span className="muted">
                {' · '}
                {m.quarantine_job != null && (
                  <>
                    <a href={`/jobs/${m.quarantine_job}`}>job #{m.quarantine_job}</a>
                    {' · '}
                  </>
                )}
                since <RelativeTime iso={m.quarantined_at} />
                {m.probation_until ? (
                  <>
                    {' · '}its health check may release it from {formatDateTime(m.probation_until)}
                  </>
                ) : (
                  ' · released by an operator only'
                )}
              </span>
              {m.health?.at && (
                <div className={m.health.ok ? 'muted' : 'text-bad'}>
                  last health check {m.health.ok ? 'passed' : 'failed'}
                  {!m.health.ok &&
                    `: ${(m.health.checks ?? [])
                      .filter((c) => !c.ok)
                      .map((c) => `${c.name}: ${c.detail}`)
                      .join('; ')}`}
                </div>
              )}
            </div>
          </td>
        </tr>
      )}
      {error && (
        <tr className="row-message">
          <td colSpan={MACHINE_COLUMNS}>
            <ErrorWithRetry
              error={error}
              onRetry={() => (ping.error ? onPing() : drain.mutate(drain.variables!))}
              retrying={ping.isPending || drain.isPending}
            >
              {ping.error ? 'Could not ping' : 'Could not change'} {m.name}:{' '}
            </ErrorWithRetry>
          </td>
        </tr>
      )}
      {confirming && <ConfirmRemove machine={m} onClose={closeConfirm} />}
      {editingVolumes && <EditVolumes machine={m} onClose={() => setEditingVolumes(false)} />}
    </>
  )
}

function RoundTripCell({ result, pending }: { result: RoundTrip | undefined; pending: boolean }) {
  if (pending) return <span className="muted">pinging…</span>
  if (!result) return <span className="muted">—</span>
  const title = result.reachable
    ? 'to its agent and back, over the broker'
    : `no answer from its agent${result.timeout_s ? ` within ${result.timeout_s} s` : ''}`
  return (
    <span className={result.reachable ? 'rtt-ok' : 'text-bad'} title={title}>
      {roundTripText(result)}
    </span>
  )
}

/** The volumes declared on the server, one `name=/path` a line; the agent's own (--volume) win. */
function EditVolumes({ machine, onClose }: { machine: Machine; onClose: () => void }) {
  const save = useSetMachineVolumes()
  const [text, setText] = useState(volumesText(machine.declared_volumes ?? {}))
  const [problem, setProblem] = useState('')
  const onSave = () => {
    const parsed = parseVolumesText(text)
    if (typeof parsed === 'string') return setProblem(parsed)
    setProblem('')
    save.mutate({ id: machine.id, volumes: parsed }, { onSuccess: onClose })
  }
  const error = problem || save.error?.message

  return (
    <tr className="row-message">
      <td colSpan={MACHINE_COLUMNS}>
        <div className="confirm" role="group" aria-label={`Volumes of ${machine.name}`}>
          <label>
            Volumes declared on the server (name=/absolute/path, one a line)
            <textarea rows={3} value={text} onChange={(event) => setText(event.target.value)} />
          </label>
          {error && (
            <span className="text-bad" role="alert">
              {error}
            </span>
          )}
          <div className="spacer" />
          <button type="button" className="small" disabled={save.isPending} onClick={onSave}>
            Save volumes
          </button>
          <button type="button" className="small" onClick={onClose}>
            Cancel
          </button>
        </div>
      </td>
    </tr>
  )
}

/** Asked in the table, under the machine, before anything is removed; Escape or Cancel keeps it. */
function ConfirmRemove({ machine, onClose }: { machine: Machine; onClose: () => void }) {
  const remove = useDeleteMachine()
  const cancel = useRef<HTMLButtonElement>(null)
  useEffect(() => cancel.current?.focus(), [])
  const inUse = isApiError(remove.error) && remove.error.status === 409

  return (
    <tr className="row-message">
      <td colSpan={MACHINE_COLUMNS}>
        <div
          className="confirm"
          role="group"
          aria-label={`Remove ${machine.name}?`}
          onKeyDown={(event) => {
            if (event.key === 'Escape') onClose()
          }}
        >
          <span>
            Remove <strong>{machine.name}</strong>? Its agent will no longer be accepted, and adding it again gives it a
            new token.
          </span>
          {remove.error && (
            <span className="text-bad" role="alert">
              {remove.error.message}
            </span>
          )}
          <div className="spacer" />
          <button
            type="button"
            className="danger small"
            disabled={remove.isPending}
            onClick={() => remove.mutate({ id: machine.id, force: inUse })}
          >
            {inUse ? 'Stop its nodes and remove' : `Remove ${machine.name}`}
          </button>
          <button ref={cancel} type="button" className="small" onClick={onClose}>
            Cancel
          </button>
        </div>
      </td>
    </tr>
  )
}
