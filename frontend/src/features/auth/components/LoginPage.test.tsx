import { screen } from '@testing-library/react'
import userEvent from '@testing-library/user-event'
import { Route, Routes } from 'react-router-dom'
import { describe, expect, it } from 'vitest'
import { csrfRoute, json, mockFetch } from '../../../test/http'
import { renderWithProviders } from '../../../test/render'
import { LoginPage } from './LoginPage'
import { RequireAuth } from './RequireAuth'

function renderAt(path: string) {
  return renderWithProviders(
    <Routes>
      <Route path="/login" element={<LoginPage />} />
      <Route element={<RequireAuth />}>
        <Route path="/jobs/:id" element={<p>job page</p>} />
      </Route>
    </Routes>,
    { path },
  )
}

async function fillAndSubmit(username: string, password: string) {
  const user = userEvent.setup()
  await user.type(screen.getByLabelText('Username'), username)
  await user.type(screen.getByLabelText('Password'), password)
  await user.click(screen.getByRole('button', { name: 'Sign in' }))
}

describe('login', () => {
  it('posts the credentials with the CSRF header and shows the error from a 400', async () => {
    const requests = mockFetch({
      ...csrfRoute('tok123'),
      'POST /api/auth/login': () => json({ detail: 'Invalid username or password.' }, 400),
    })
    renderAt('/login')

    await fillAndSubmit('ada', 'wrong')

    expect(await screen.findByRole('alert')).toHaveTextContent('Invalid username or password.')
    const login = requests.find((r) => r.path === '/api/auth/login')!
    expect(login.method).toBe('POST')
    expect(login.body).toEqual({ username: 'ada', password: 'wrong' })
    expect(login.headers.get('X-CSRFToken')).toBe('tok123')
    expect(login.credentials).toBe('same-origin')
    // The cookie came from GET /api/auth/csrf, asked for before the first POST.
    expect(requests.map((r) => `${r.method} ${r.path}`)).toEqual(['GET /api/auth/csrf', 'POST /api/auth/login'])
    expect(screen.getByTestId('location')).toHaveTextContent('/login')
  })

  it('sends a logged-out visitor to /login and back where they came from after signing in', async () => {
    let loggedIn = false
    mockFetch({
      ...csrfRoute(),
      'GET /api/auth/me': () =>
        loggedIn
          ? json({ username: 'ada', is_staff: false })
          : json({ detail: 'Authentication credentials were not provided.' }, 403),
      'POST /api/auth/login': () => {
        loggedIn = true
        return json({ username: 'ada' })
      },
    })
    renderAt('/jobs/7')

    expect(await screen.findByRole('button', { name: 'Sign in' })).toBeInTheDocument()
    expect(screen.getByTestId('location')).toHaveTextContent('/login')

    await fillAndSubmit('ada', 'secret')

    expect(await screen.findByText('job page')).toBeInTheDocument()
    expect(screen.getByTestId('location')).toHaveTextContent('/jobs/7')
  })
})
