import { ErrorWithRetry } from '../../../components/ErrorWithRetry'
import { RelativeTime } from '../../../components/RelativeTime'
import { formatDateTime } from '../../../lib/format'
import type { ApiToken } from '../api/get-tokens'
import { useRevokeToken } from '../api/revoke-token'

function formatDate(iso: string | null): string {
  if (!iso) return 'never'
  return new Date(iso).toLocaleDateString(undefined, { year: 'numeric', month: 'short', day: 'numeric' })
}

export function TokensTable({ tokens }: { tokens: ApiToken[] }) {
  const revoke = useRevokeToken()

  const onRevoke = (token: ApiToken) => {
    if (window.confirm(`Revoke the API token "${token.name}"? Anything that uses it stops working at once.`)) {
      revoke.mutate(token.id)
    }
  }

  if (tokens.length === 0) {
    return (
      <p className="empty">
        No API tokens. Create one for a script, or sign in with <code>torchyard login</code>.
      </p>
    )
  }

  return (
    <>
      {revoke.isError && (
        <ErrorWithRetry error={revoke.error} onRetry={() => revoke.mutate(revoke.variables!)} retrying={revoke.isPending}>
          Could not revoke the token:{' '}
        </ErrorWithRetry>
      )}
      <table className="table">
        <thead>
          <tr>
            <th>Name</th>
            <th>Starts with</th>
            <th>Created</th>
            <th>Expires</th>
            <th>Last used</th>
            <th aria-label="Actions" />
          </tr>
        </thead>
        <tbody>
          {tokens.map((t) => (
            <tr key={t.id}>
              <td className="strong">{t.name}</td>
              <td className="mono">{t.prefix}…</td>
              <td className="muted">{formatDateTime(t.created)}</td>
              <td>{formatDate(t.expiry)}</td>
              <td className="muted">{t.last_used ? <RelativeTime iso={t.last_used} /> : 'never'}</td>
              <td className="actions">
                <button
                  type="button"
                  className="danger small"
                  onClick={() => onRevoke(t)}
                  disabled={revoke.isPending && revoke.variables === t.id}
                >
                  Revoke
                </button>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </>
  )
}
