/**
 * What React Flow needs from a browser that happy-dom lacks (as React Flow's testing guide lists):
 * ResizeObserver (it measures the pane and each node) and DOMMatrixReadOnly (it reads the zoom).
 * happy-dom lays nothing out, so the pane measures 0 x 0 and nodes keep the sizes the layout gives.
 */
class ResizeObserverStub {
  observe(): void {}
  unobserve(): void {}
  disconnect(): void {}
}

class DOMMatrixReadOnlyStub {
  m22: number
  constructor(transform?: string) {
    const scale = transform?.match(/scale\(([0-9.]+)\)/)?.[1]
    this.m22 = scale === undefined ? 1 : Number(scale)
  }
}

export function installReactFlowStubs(): void {
  globalThis.ResizeObserver ??= ResizeObserverStub as unknown as typeof ResizeObserver
  globalThis.DOMMatrixReadOnly ??= DOMMatrixReadOnlyStub as unknown as typeof DOMMatrixReadOnly
}
