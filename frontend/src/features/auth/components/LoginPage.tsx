import { useState, type FormEvent } from 'react'
import { useLocation, useNavigate, type Location } from 'react-router-dom'
import { Field } from '../../../components/Field'
import { isApiError } from '../../../lib/api'
import { useLogin } from '../api/login'

function redirectTarget(state: unknown): string {
  const from = (state as { from?: Partial<Location> } | null)?.from
  if (!from?.pathname || from.pathname === '/login') return '/'
  return `${from.pathname}${from.search ?? ''}${from.hash ?? ''}`
}

export function LoginPage() {
  const navigate = useNavigate()
  const location = useLocation()
  const login = useLogin()
  const [username, setUsername] = useState('')
  const [password, setPassword] = useState('')

  const onSubmit = (event: FormEvent<HTMLFormElement>) => {
    event.preventDefault()
    login.mutate(
      { username, password },
      { onSuccess: () => navigate(redirectTarget(location.state), { replace: true }) },
    )
  }

  let error: string | null = null
  if (login.isError) {
    error =
      isApiError(login.error) && login.error.status === 400
        ? (login.error.body?.detail ?? 'Invalid username or password.')
        : `Login failed: ${login.error.message}`
  }

  return (
    <div className="login-screen">
      <form className="login-card" onSubmit={onSubmit} aria-label="Sign in">
        <div className="brand brand-large">
          <span className="brand-mark" aria-hidden="true" />
          Torchyard
        </div>
        <Field label="Username">
          <input
            name="username"
            autoComplete="username"
            autoFocus
            required
            value={username}
            onChange={(e) => setUsername(e.target.value)}
          />
        </Field>
        <Field label="Password">
          <input
            name="password"
            type="password"
            autoComplete="current-password"
            required
            value={password}
            onChange={(e) => setPassword(e.target.value)}
          />
        </Field>
        {error && (
          <p className="form-error" role="alert">
            {error}
          </p>
        )}
        <button type="submit" className="primary" disabled={login.isPending}>
          {login.isPending ? 'Signing in…' : 'Sign in'}
        </button>
      </form>
    </div>
  )
}
