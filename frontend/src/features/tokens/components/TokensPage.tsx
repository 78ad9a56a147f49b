import { useState } from 'react'
import { QueryError } from '../../../components/QueryError'
import { useTokens } from '../api/get-tokens'
import { CreateTokenForm } from './CreateTokenForm'
import { TokensTable } from './TokensTable'

/** The signed-in user's API tokens: for scripts and the CLI (`Authorization: Token <t>`). */
export function TokensPage() {
  const tokens = useTokens()
  const [creating, setCreating] = useState(false)

  return (
    <section className="panel" aria-labelledby="tokens-title">
      <header className="panel-header">
        <h2 id="tokens-title">API tokens</h2>
        {tokens.data && <span className="muted">{tokens.data.length}</span>}
        <div className="spacer" />
        {!creating && (
          <button type="button" className="primary small" onClick={() => setCreating(true)}>
            New token
          </button>
        )}
      </header>
      {creating && <CreateTokenForm onClose={() => setCreating(false)} />}
      {tokens.isPending && <p className="muted">Loading…</p>}
      {tokens.isError && <QueryError error={tokens.error} what="API tokens" onRetry={() => void tokens.refetch()} retrying={tokens.isFetching} />}
      {tokens.data && <TokensTable tokens={tokens.data} />}
    </section>
  )
}
