import { NavLink, Outlet, useNavigate } from 'react-router-dom'
import { useMe } from '../features/auth/api/get-me'
import { useLogout } from '../features/auth/api/logout'
import { useClusterStreamStatus } from '../lib/cluster-stream-status'
import { ClusterStreamProvider } from './ClusterStreamProvider'

function StreamIndicator() {
  const status = useClusterStreamStatus()
  const text = status === 'open' ? 'live' : status === 'connecting' ? 'connecting' : 'polling'
  return (
    <span className="stream-indicator" title="Cluster updates over WebSocket (polls every 5 s when down)">
      <span className={`stream-dot stream-${status}`} /> {text}
    </span>
  )
}

function TopBar() {
  const me = useMe()
  const logout = useLogout()
  const navigate = useNavigate()
  return (
    <header className="topbar">
      <StreamIndicator />
      <div className="spacer" />
      {me.data && <span className="user">{me.data.username}</span>}
      <button
        type="button"
        className="ghost small"
        disabled={logout.isPending}
        onClick={() => logout.mutate(undefined, { onSettled: () => navigate('/login', { replace: true }) })}
      >
        Log out
      </button>
    </header>
  )
}

export function AppLayout() {
  return (
    <ClusterStreamProvider>
      <div className="shell">
        <nav className="sidebar" aria-label="Main">
          <div className="brand">
            <span className="brand-mark" aria-hidden="true" />
            Torchyard
          </div>
          <NavLink to="/" end>
            Overview
          </NavLink>
          <NavLink to="/machines">Machines</NavLink>
          <NavLink to="/jobs">Jobs</NavLink>
          <NavLink to="/queue">Queue</NavLink>
          <NavLink to="/usage">Usage</NavLink>
          <NavLink to="/projects">Projects</NavLink>
          <NavLink to="/experiments">Experiments</NavLink>
          <NavLink to="/sweeps">Sweeps</NavLink>
          <NavLink to="/topology">Topology</NavLink>
          <div className="spacer" />
          <NavLink to="/tokens" className="sidebar-foot">
            API tokens
          </NavLink>
          <a href="/api/docs/" className="sidebar-foot">
            API docs
          </a>
        </nav>
        <div className="main-col">
          <TopBar />
          <main className="content">
            <Outlet />
          </main>
        </div>
      </div>
    </ClusterStreamProvider>
  )
}
