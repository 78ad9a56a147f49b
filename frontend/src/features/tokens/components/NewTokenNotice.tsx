import { OneTimeSecret } from '../../../components/OneTimeSecret'
import type { ApiTokenCreated } from '../api/create-token'

/** Shown once after creating a token: the server keeps only its hash, so it cannot be shown again. */
export function NewTokenNotice({ token, onDone }: { token: ApiTokenCreated; onDone: () => void }) {
  return (
    <OneTimeSecret secret={token.token} onDone={onDone}>
      Token <strong>{token.name}</strong> created. Copy it now: it is shown only once. Scripts send it as{' '}
      <code>Authorization: Token …</code>; the CLI reads it from <code>TORCHYARD_TOKEN</code>.
    </OneTimeSecret>
  )
}
