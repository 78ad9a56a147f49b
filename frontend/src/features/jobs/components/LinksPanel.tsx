import { formatNumber } from '../../../lib/format'
import type { JobDetail } from '../../../lib/types'

type Links = JobDetail['links']
type LinkNetwork = NonNullable<Links['networks']>[number]
type LinkPair = NonNullable<Links['pairs']>[number]

/**
 * The links between the job's machines as its preflight measured them: one heat map per network
 * they all share (a cell per pair of nodes, its bandwidth and latency, darker when faster), the
 * network the job's traffic is pinned to marked, and the pairs below half the median in red.
 * Hidden for a job whose links were never measured (one node, or launched before they were).
 */
export function LinksPanel({ job }: { job: JobDetail }) {
  const links = job.links
  const networks = links.networks ?? []
  if (!networks.length) return null
  const machines = links.machines ?? {}
  const ranks = Object.keys(machines)
    .map(Number)
    .sort((a, b) => a - b)
  const pairs = links.pairs ?? []
  const fastest = Math.max(1, ...pairs.map((p) => p.mb_per_s))
  return (
    <section className="panel" aria-label="Links">
      <header className="panel-header">
        <h2>Links</h2>
        <span className="muted">
          measured in {formatNumber(links.seconds ?? 0, 1)} s
          {links.attempt != null ? ` on attempt ${links.attempt}` : ''}
          {links.median_mb_per_s != null ? ` · median ${formatNumber(links.median_mb_per_s, 0)} MB/s` : ''}
        </span>
      </header>
      {links.summary && <p className={pairs.some((p) => p.flagged) ? 'text-bad' : 'muted'}>{links.summary}</p>}
      <div className="link-maps">
        {networks.map((network) => (
          <NetworkMap
            key={network.network}
            network={network}
            ranks={ranks}
            machines={machines}
            pairs={pairs.filter((p) => p.network === network.network)}
            fastest={fastest}
          />
        ))}
      </div>
    </section>
  )
}

function NetworkMap({
  network,
  ranks,
  machines,
  pairs,
  fastest,
}: {
  network: LinkNetwork
  ranks: number[]
  machines: Record<string, string>
  pairs: LinkPair[]
  fastest: number
}) {
  // Each pair was probed once, by one of its two nodes: the map shows it both ways.
  const cell = new Map<string, LinkPair>()
  for (const p of pairs) {
    cell.set(`${p.a}-${p.b}`, p)
    cell.set(`${p.b}-${p.a}`, p)
  }
  const name = (rank: number) => machines[String(rank)] ?? `node ${rank}`
  return (
    <figure className={`link-map${network.chosen ? ' chosen' : ''}`} aria-label={`Network ${network.network}`}>
      <figcaption>
        <span className="mono strong">{network.network}</span>
        {network.chosen && <span className="label-chip">the job's traffic</span>}
        {network.registered && <span className="muted"> · the registered addresses</span>}
        {!network.usable && <span className="text-bad"> · not every pair connects</span>}
        <div className="muted">
          slowest pair {network.slowest_mb_per_s != null ? `${formatNumber(network.slowest_mb_per_s, 0)} MB/s` : '—'}
          {network.latency_ms != null ? ` · ${formatNumber(network.latency_ms, 2)} ms` : ''}
        </div>
      </figcaption>
      <table className="link-grid">
        <thead>
          <tr>
            <th aria-label="From" />
            {ranks.map((r) => (
              <th key={r} scope="col" title={`${name(r)}: ${network.interfaces[String(r)] ?? '?'}`}>
                {name(r)}
              </th>
            ))}
          </tr>
        </thead>
        <tbody>
          {ranks.map((a) => (
            <tr key={a}>
              <th scope="row" title={`${name(a)}: ${network.interfaces[String(a)] ?? '?'}`}>
                {name(a)}
              </th>
              {ranks.map((b) => (
                <PairCell key={b} pair={a === b ? undefined : cell.get(`${a}-${b}`)} self={a === b} fastest={fastest} />
              ))}
            </tr>
          ))}
        </tbody>
      </table>
    </figure>
  )
}

function PairCell({ pair, self, fastest }: { pair: LinkPair | undefined; self: boolean; fastest: number }) {
  if (self) return <td className="link-cell self" aria-label="itself" />
  if (!pair) return <td className="link-cell missing">—</td>
  if (pair.error) {
    return (
      <td className="link-cell flagged" title={pair.error}>
        failed
      </td>
    )
  }
  // Darker with speed, on one scale for every network, so the faster network reads darker.
  const share = Math.max(0.08, Math.min(1, pair.mb_per_s / fastest))
  return (
    <td
      className={`link-cell${pair.flagged ? ' flagged' : ''}`}
      style={
        pair.flagged
          ? undefined
          : { backgroundColor: `rgba(37, 99, 235, ${share.toFixed(2)})`, color: share > 0.55 ? '#fff' : undefined }
      }
      title={`${formatNumber(pair.mb_per_s, 1)} MB/s, ${formatNumber(pair.latency_ms, 2)} ms${pair.flagged ? ': below half the median' : ''}`}
    >
      <div className="strong">{formatNumber(pair.mb_per_s, 0)} MB/s</div>
      <div>{formatNumber(pair.latency_ms, 2)} ms</div>
    </td>
  )
}
