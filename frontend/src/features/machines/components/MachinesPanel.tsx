import { useCallback, useState } from 'react'
import { QueryError } from '../../../components/QueryError'
import { useMe } from '../../auth/api/get-me'
import { useMachines } from '../api/get-machines'
import { useHealthCheckAll } from '../api/health-check'
import { AddMachineForm } from './AddMachineForm'
import type { RoundTrip } from '../../../lib/machine-summary'
import { MachinesTable } from './MachinesTable'

export function MachinesPanel() {
  const machines = useMachines()
  // Only staff manage machines (the API answers 403 to anyone else); everyone signed in may ping.
  const canManage = useMe().data?.is_staff ?? false
  const [adding, setAdding] = useState(false)
  const [roundTrips, setRoundTrips] = useState<Record<number, RoundTrip>>({})
  const health = useHealthCheckAll()

  const onRoundTrip = useCallback((id: number, result: RoundTrip) => setRoundTrips((old) => ({ ...old, [id]: result })), [])
  const checkAll = () =>
    health.mutate(undefined, {
      onSuccess: (check) =>
        setRoundTrips((old) => ({
          ...old,
          ...Object.fromEntries(check.results.map((r) => [r.machine_id, { reachable: r.reachable, rtt_ms: r.rtt_ms }])),
        })),
    })

  return (
    <section className="panel" aria-labelledby="machines-title">
      <header className="panel-header">
        <h2 id="machines-title">Machines</h2>
        {machines.data && <span className="muted">{machines.data.length}</span>}
        <div className="spacer" />
        <span className="health-summary" role="status">
          {health.isPending
            ? 'Checking every agent…'
            : health.data
              ? `${health.data.healthy} of ${health.data.total} answered`
              : health.isError
                ? `Health check failed: ${health.error.message}`
                : ''}
        </span>
        <button type="button" className="small" onClick={checkAll} disabled={health.isPending || !machines.data?.length}>
          Health check all
        </button>
        {canManage && !adding && (
          <button type="button" className="primary small" onClick={() => setAdding(true)}>
            Add machine
          </button>
        )}
      </header>
      {adding && <AddMachineForm machines={machines.data ?? []} onClose={() => setAdding(false)} />}
      {machines.isPending && <p className="muted">Loading…</p>}
      {machines.isError && <QueryError error={machines.error} what="machines" onRetry={() => void machines.refetch()} retrying={machines.isFetching} />}
      {machines.data && (
        <MachinesTable
          machines={machines.data}
          canManage={canManage}
          roundTrips={roundTrips}
          checking={health.isPending}
          onRoundTrip={onRoundTrip}
        />
      )}
    </section>
  )
}
