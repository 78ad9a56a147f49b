"""When to save: `checkpointing.every_n_steps` as a number of steps, or "auto".

"auto" picks the interval that loses the least time to failures and to saving, by Young and Daly's
rule: tau = sqrt(2 x C x M), C the time a save blocks the training loop (measured at every save) and
M the job's mean time between failures (the control plane's estimate from its machines' history:
jobs/control/cadence.py, in the job config's `checkpointing.cadence`). The interval becomes a number
of steps from the measured time per step. The first save comes after FIRST_STEPS steps; after each
save rank 0 revises the interval and every rank takes its number of steps (one small broadcast at a
save, when the ranks meet anyway), so the ranks always save at the same steps. A revision of more
than REVISE is announced: a line in the job's log with the interval, its figures and its reasons,
and the `checkpoint_interval_s` metric on the job's charts.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable

AUTO = "auto"
FIRST_STEPS = 100
# A job run outside Torchyard, or by a control plane that sent no estimate: machines that fail daily.
DEFAULT_MTBF_S = 24 * 3600.0
REVISE = 0.25


def young_daly(cost_s: float, mtbf_s: float) -> float:
    """The checkpoint interval, in seconds, that minimises the expected time lost (first order)."""
    return math.sqrt(2 * max(cost_s, 1e-3) * max(mtbf_s, 1.0))


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.1f} min"


class Cadence:
    """Whether a step is one to save at (`due`), and, under "auto", what the saves teach (`saved`)."""

    def __init__(self, every: int | str, *, mtbf_s: float = DEFAULT_MTBF_S, why: str = "",
                 agree: Callable[[int], int] = lambda steps: steps, clock: Callable[[], float] = time.monotonic,
                 announce: Callable[[int, float, str], None] | None = None) -> None:
        self.auto = every == AUTO
        self.every = FIRST_STEPS if self.auto else max(0, int(every))
        self.mtbf_s, self.why = mtbf_s, why
        self._agree, self._clock, self._announce = agree, clock, announce
        self._next = self.every  # the next step to save at
        self._mark: tuple[float, int] | None = None  # (time, step) the measurement of step time runs from
        self._announced: float | None = None
        self.interval_s: float | None = None
        self._cost_s: float | None = None

    @property
    def enabled(self) -> bool:
        return self.every > 0

    def due(self, step: int) -> bool:
        if self._mark is None:
            self._mark = (self._clock(), step)  # the end of this step: the time per step counts from here
        if not self.enabled:
            return False
        return step >= self._next if self.auto else step % self.every == 0

    def saved(self, step: int, blocking_s: float) -> None:
        """A save at `step` blocked the loop `blocking_s` seconds: under "auto", the next interval."""
        now = self._clock()
        if not self.auto:
            return
        since, from_step = self._mark or (now, step)
        steps = max(step - from_step, 1)
        step_s = max((now - since - blocking_s) / steps, 1e-6)
        # The expected cost of a save: the saves' own costs vary (the page cache, the store's load).
        self._cost_s = blocking_s if self._cost_s is None else 0.5 * (self._cost_s + blocking_s)
        self.interval_s = young_daly(self._cost_s, self.mtbf_s)
        self.every = self._agree(max(1, round(self.interval_s / step_s)))
        self._next = step + self.every
        self._mark = (now, step)
        if self._announce is not None and (self._announced is None
                                           or abs(self.interval_s - self._announced) > REVISE * self._announced):
            self._announced = self.interval_s
            self._announce(step, self.interval_s, self.describe(self._cost_s, step_s))

    def describe(self, cost_s: float, step_s: float) -> str:
        return (f"checkpoint cadence (auto): every {self.every} steps (about {self.interval_s or 0:.0f} s at "
                f"{step_s:.3g} s a step): a save blocks the loop {cost_s:.2f} s and the job's machines fail every "
                f"{_hours(self.mtbf_s)} on average ({self.why or 'no history: a prior of one fault a day'}); "
                f"Young/Daly: sqrt(2 x {cost_s:.2f} s x {_hours(self.mtbf_s)})")

    def plan(self) -> str:
        """What the job's log says as training starts."""
        if not self.enabled:
            return "-"
        return f"auto (first after {self.every} steps)" if self.auto else str(self.every)


def print_line(message: str) -> None:
    print(f"[torchyard] {message}", file=sys.stderr, flush=True)
