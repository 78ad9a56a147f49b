import { Navigate, Outlet, useLocation } from 'react-router-dom'
import { isApiError } from '../../../lib/api'
import { useMe } from '../api/get-me'

/** Renders the protected routes once /api/auth/me answers; sends anyone else to /login. */
export function RequireAuth() {
  const location = useLocation()
  const me = useMe()

  if (me.isPending) return <div className="page-message">Loading…</div>
  if (me.isError) {
    if (isApiError(me.error) && me.error.isAuthError) {
      return <Navigate to="/login" replace state={{ from: location }} />
    }
    return (
      <div className="page-message">
        <p>Cannot reach the server: {me.error.message}</p>
        <button type="button" onClick={() => void me.refetch()}>
          Retry
        </button>
      </div>
    )
  }
  return <Outlet />
}
