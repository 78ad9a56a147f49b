"""A job's progress as a typed value: what its ranks' metric events folded into (services'
job_record_progress, rates.py, stalls.py) and Job.progress stores as JSON. Its one writer holds
the job's row lock; JobProgressOut (serializers.py) renders the stored JSON."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from .stored import StoredValue, shown

# Per-attempt numbers, written as null when a new attempt starts (its ranks report afresh).
PER_ATTEMPT_NULLS = frozenset({"rate_anchor", "steps_per_second", "samples_per_second"})


@dataclass
class JobProgress(StoredValue):
    """A job's progress, folded from its ranks' metrics (jobs/rates.py); null until reported."""

    # In the order the API shows them. step, total_steps, loss, throughput and eta_seconds are
    # written from submission on (null until reported), the others once reported.
    step: int | None = None
    total_steps: int | None = shown(None, help_text="declared by the script, or the spec's --steps")
    loss: float | None = None
    lr: float | None = None
    throughput: float | None = shown(None, help_text="every rank's latest throughput, summed")
    throughput_by_rank: dict[str, float] | None = shown(
        None, absent_as=dict, help_text="each rank's latest throughput, by rank: a straggler stands out")
    steps_per_second: float | None = shown(None, help_text="over the current attempt")
    samples_per_second: float | None = None
    eta_seconds: float | None = None
    # stalls.py: the current attempt's stall view (StallOut's shape), absent when nothing stalls.
    stall: dict[str, Any] | None = shown(None, allow_null=True, help_text="null unless ranks of the current attempt stalled")
    # stragglers.py: the current attempt's ranks named slower than the others (StragglerOut's shape).
    stragglers: list[dict[str, Any]] | None = shown(None, absent_as=list,
                                                    help_text="ranks of the current attempt named stragglers")
    step_by_rank: dict[str, int] | None = None  # every rank's last step, for stall verdicts
    # stragglers.py: each rank's last pace window and since when it has been slow.
    pace: dict[str, Any] | None = None
    # rates.py: the first step of the attempt and its time ({"step", "ts"}), each rank's samples/s.
    rate_anchor: dict[str, Any] | None = None
    samples_by_rank: dict[str, float] | None = None
    OMIT_WHEN_NONE: ClassVar = frozenset({
        "lr", "throughput_by_rank", "step_by_rank", "rate_anchor", "samples_by_rank", "steps_per_second",
        "samples_per_second", "stall", "stragglers", "pace"})
    # What rates.py, stalls.py and stragglers.py keep between folds.
    INTERNAL: ClassVar = frozenset({"step_by_rank", "rate_anchor", "samples_by_rank", "pace"})

    def for_new_attempt(self) -> JobProgress:
        """What a new attempt starts from: its ranks' throughput, steps, rates and stalls cleared,
        the job's step, loss and total kept."""
        return dataclasses.replace(
            self, throughput_by_rank={}, throughput=None, step_by_rank={}, rate_anchor=None, samples_by_rank={},
            steps_per_second=None, samples_per_second=None, stall=None, stragglers=None, pace=None,
            stored_null=(self.stored_null - {"stall"}) | PER_ATTEMPT_NULLS)
