import { categoryHint, categoryLabel, formatSeconds, formatShare, goodputShares } from '../lib/goodput'
import type { GoodputParts } from '../lib/types'

/**
 * Where some wall time went, as one stacked bar: a segment per category that got any, in the
 * order of a job's life, each as wide as its share (the server splits it; this only lays it out).
 */
export function GoodputBar({ parts, label }: { parts: GoodputParts; label: string }) {
  const shares = goodputShares(parts)
  const summary = shares.map((s) => `${categoryLabel(s.category)} ${formatShare(s.share)}`).join(', ')
  return (
    <div className="goodput-bar" role="img" aria-label={`${label}: ${summary || 'no time yet'}`}>
      {shares.map((s) => (
        <span
          key={s.category}
          className={`goodput-segment gp-${s.category}`}
          style={{ width: `${100 * s.share}%` }}
          data-category={s.category}
          title={`${categoryLabel(s.category)}: ${formatSeconds(s.seconds)} (${formatShare(s.share)}), ${categoryHint(s.category)}`}
        />
      ))}
    </div>
  )
}

/** The bar's key: each category that got any time, with its seconds and share. */
export function GoodputLegend({ parts }: { parts: GoodputParts }) {
  const shares = goodputShares(parts)
  return (
    <ul className="goodput-legend" aria-label="Where the time went">
      {shares.map((s) => (
        <li key={s.category} data-category={s.category} title={categoryHint(s.category)}>
          <span className={`goodput-swatch gp-${s.category}`} aria-hidden="true" />
          {categoryLabel(s.category)} <span className="muted">{formatSeconds(s.seconds)}</span>{' '}
          <span className="muted small">{formatShare(s.share)}</span>
        </li>
      ))}
    </ul>
  )
}
