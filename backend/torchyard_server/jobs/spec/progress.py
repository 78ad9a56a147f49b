"""A job's and a node's progress as typed values: what the job's ranks' metric events folded into
(control/metrics.py job_record_progress, rates.py, stalls.py), stored as Job.progress's JSON, and
each node's own (NodeProgress, JobNode.progress). Each has one writer, under its row's lock;
JobProgressOut and NodeProgressOut (api/serializers.py) render the stored JSON."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar, Literal, NotRequired, TypedDict

from torchyard.stream_contract import PaceHost, RayNode

from .stored import StoredValue, declared_fields, shown


class StalledRank(TypedDict):
    """A stalled rank in the stall view, from its `stalled` event and its node (StalledRankOut)."""

    step: int | None
    stalled_for: float | None
    timeout: float | None
    timeout_basis: str
    process_state: str | None  # psutil's word: "running", "stopped", ...
    waits_in: str | None  # the collective its main thread waits in; "": none; None: no stack read
    frame: str | None
    last_line: str | None
    machine: str | None
    node_rank: int | None
    event: int  # the `stalled` event's id


class QuietNode(TypedDict):
    """A node of the attempt gone quiet (lost, or no heartbeat for half the heartbeat timeout)."""

    node_rank: int
    machine: str
    ranks: list[int]  # its first and last global rank
    silent_for: int | None  # seconds since its last heartbeat (None: it never beat)


class Culprit(TypedDict):
    """A rank, or a node gone quiet, that holds the others, and what says so (StallCulpritOut)."""

    rank: int | None  # None: a whole node went quiet
    ranks: list[int]
    machine: str | None
    node_rank: int | None
    cause: Literal["process", "heartbeat", "stack"]
    evidence: str


class StallView(TypedDict):
    """The current attempt's stalled ranks and the verdict on them (control/stalls.py; StallOut)."""

    attempt: int
    ranks: dict[str, StalledRank]  # by global rank
    quiet: NotRequired[list[QuietNode]]
    kind: NotRequired[Literal["culprit", "collective", "straggler", "rank"]]
    summary: NotRequired[str]
    culprits: NotRequired[list[Culprit]]
    quarantined: NotRequired[list[str]]  # machines quarantined for it (on_stall: recover)


class RankWindow(TypedDict):
    """A rank's last pace window (its node's `pace` event) and the straggler watch's view of it."""

    own_step_s: float
    step_s: float | None
    own_share: float | None
    stopped: float | None
    cpu_wait: float | None
    throttled: int | None
    machine: str | None
    node_rank: int | None
    at: float  # epoch seconds: when the window was reported
    window_s: float
    slow_since: NotRequired[float]  # epoch seconds: since when it has been slow
    median_s: NotRequired[float]  # the other ranks' median own step time, when last judged


class PaceView(TypedDict):
    """What control/stragglers.py keeps between `pace` events of the current attempt."""

    attempt: int
    every: float  # seconds between a node's pace events
    ranks: dict[str, RankWindow]  # by global rank
    hosts: dict[str, PaceHost]  # by node rank: the machine's figures over its last window
    named: list[str]  # the ranks named stragglers


class Straggler(TypedDict):
    """A rank named slower than the others (StragglerOut), and a `straggler` event's figures."""

    rank: int
    machine: str | None
    node_rank: int | None
    own_step_s: float
    median_s: float | None
    policy: Literal["report", "replace"]  # fault_tolerance.stragglers
    ratio: NotRequired[float | None]
    step_s: NotRequired[float | None]
    slow_since: NotRequired[float | None]
    evidence: NotRequired[str]
    # policy replace: "pending" (at the next committed checkpoint), "replaced", or why not.
    replace: NotRequired[str]


class RateAnchor(TypedDict):
    """The first step the attempt reported, and when (epoch seconds): rates.py's origin."""

    step: int
    ts: float


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
    stall: StallView | None = shown(None, allow_null=True, help_text="null unless ranks of the current attempt stalled")
    # stragglers.py: the current attempt's ranks named slower than the others (StragglerOut's shape).
    stragglers: list[Straggler] | None = shown(None, absent_as=list,
                                                    help_text="ranks of the current attempt named stragglers")
    step_by_rank: dict[str, int] | None = None  # every rank's last step, for stall verdicts
    # stragglers.py: each rank's last pace window and since when it has been slow.
    pace: PaceView | None = None
    # rates.py: the first step of the attempt and its time ({"step", "ts"}), each rank's samples/s.
    rate_anchor: RateAnchor | None = None
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


@dataclass
class NodeProgress(StoredValue):
    """A node's own progress, as JobNode.progress stores it: its latest metric (step, loss,
    throughput), and under framework ray its Ray processes as its `running` report gave them. Two
    reports write it, each its own part, and jobs/control/metrics.py node_merge_progress merges them
    (the one writer, under the node's row lock); NodeProgressOut (jobs/api/serializers.py) reads it."""

    step: int | None = None
    loss: float | None = None
    throughput: float | None = None
    ray: RayNode | None = shown(None, allow_null=True, read_only=True, help_text=(
        "framework ray: the node's Ray ports, from its `running` report; null before it and for every other job"))
    # A part is written only once reported: the other report's part stays as it was.
    OMIT_WHEN_NONE: ClassVar = frozenset({"step", "loss", "throughput", "ray"})

    def merged(self, update: NodeProgress) -> NodeProgress:
        """What it holds with `update`'s reported parts (those not None) over it."""
        given = {f.name: getattr(update, f.name) for f in declared_fields(NodeProgress)
                 if getattr(update, f.name) is not None}
        return dataclasses.replace(self, **given, stored_null=self.stored_null - given.keys())
