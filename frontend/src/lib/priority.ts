import type { PriorityInput } from './types'

// The server's named priorities (projects/priorities.py): points on one integer line, higher first.
export const PRIORITY_NAMES = { low: -10, normal: 0, high: 10 } as const
export type PriorityName = keyof typeof PRIORITY_NAMES

const NAME_OF = new Map<number, PriorityName>(
  (Object.entries(PRIORITY_NAMES) as [PriorityName, number][]).map(([name, value]) => [value, name]),
)

/** -10 -> "low", 0 -> "normal", 10 -> "high", 5 -> "5". */
export function priorityLabel(value: number): string {
  return NAME_OF.get(value) ?? String(value)
}

/** The badge's colour: above normal, normal, or below. */
export function priorityTone(value: number): 'high' | 'normal' | 'low' {
  return value > 0 ? 'high' : value < 0 ? 'low' : 'normal'
}

/** What a select's value stands for, as PATCH /api/jobs/{id} takes it: a name, else the integer. */
export function priorityInput(value: string): PriorityInput {
  return value in PRIORITY_NAMES ? (value as PriorityName) : Number(value)
}

/** The choices of a priority select: the three names, plus `current` where it is another number. */
export function priorityChoices(current: number): { value: string; label: string }[] {
  const choices: { value: string; label: string; number: number }[] = (
    Object.entries(PRIORITY_NAMES) as [PriorityName, number][]
  ).map(([name, value]) => ({
    value: name,
    label: name,
    number: value,
  }))
  if (!NAME_OF.has(current)) choices.push({ value: String(current), label: String(current), number: current })
  return choices.sort((a, b) => b.number - a.number).map(({ value, label }) => ({ value, label }))
}

/** The select's value for a priority: its name when it has one. */
export const priorityValue = (value: number): string => NAME_OF.get(value) ?? String(value)
