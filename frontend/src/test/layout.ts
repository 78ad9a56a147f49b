import { afterEach, beforeEach } from 'vitest'

/**
 * happy-dom lays nothing out: every element measures 0 x 0, and a virtualised list (the job's log)
 * then shows no row. This gives elements a size in the tests of the calling file.
 */
export function withElementSize(width: number, height: number): void {
  const saved: [string, PropertyDescriptor | undefined][] = []
  beforeEach(() => {
    for (const [name, value] of [
      ['offsetWidth', width],
      ['offsetHeight', height],
      ['clientWidth', width],
      ['clientHeight', height],
    ] as const) {
      saved.push([name, Object.getOwnPropertyDescriptor(HTMLElement.prototype, name)])
      Object.defineProperty(HTMLElement.prototype, name, { configurable: true, get: () => value })
    }
  })
  afterEach(() => {
    for (const [name, descriptor] of saved.splice(0)) {
      if (descriptor) Object.defineProperty(HTMLElement.prototype, name, descriptor)
      else delete (HTMLElement.prototype as unknown as Record<string, unknown>)[name]
    }
  })
}
