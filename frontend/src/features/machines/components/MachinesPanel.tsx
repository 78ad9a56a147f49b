import { useState } from 'react'
import { QueryError } from '../../../components/QueryError'
import { useMachines } from '../api/get-machines'
import { AddMachineForm } from './AddMachineForm'
import { MachinesTable } from './MachinesTable'

export function MachinesPanel() {
  const machines = useMachines()
  const [adding, setAdding] = useState(false)

  return (
    <section className="panel" aria-labelledby="machines-title">
      <header className="panel-header">
        <h2 id="machines-title">Machines</h2>
        {machines.data && <span className="muted">{machines.data.length}</span>}
        <div className="spacer" />
        {!adding && (
          <button type="button" className="primary small" onClick={() => setAdding(true)}>
            Add machine
          </button>
        )}
      </header>
      {adding && <AddMachineForm onClose={() => setAdding(false)} />}
      {machines.isPending && <p className="muted">Loading…</p>}
      {machines.isError && <QueryError error={machines.error} what="machines" />}
      {machines.data && <MachinesTable machines={machines.data} />}
    </section>
  )
}
