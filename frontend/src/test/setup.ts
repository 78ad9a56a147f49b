import '@testing-library/jest-dom/vitest'
import { cleanup } from '@testing-library/react'
import { afterEach, beforeEach } from 'vitest'
import { FakeWebSocket } from './fake-websocket'
import { installReactFlowStubs } from './react-flow'

installReactFlowStubs()

beforeEach(() => {
  FakeWebSocket.reset()
})

afterEach(() => {
  cleanup()
  document.cookie = 'csrftoken=; expires=Thu, 01 Jan 1970 00:00:00 GMT; path=/'
})
