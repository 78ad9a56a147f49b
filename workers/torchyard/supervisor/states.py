"""What a node supervisor is and ends with: its state enum, settings, outcome and result.json.

Modelled on torch elastic's agent (torch/distributed/elastic/agent/server/api.py: WorkerState,
RunResult): the parts (preparation, preflight, rank processes, output pump, wind-down) share these
and nothing else of the supervisor.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, TypedDict

from torchyard import protocol
from torchyard.stream_contract import LogLine, ResultEvent

ENV_STOP_GRACE = "TORCHYARD_SUPERVISOR_STOP_GRACE_S"
ENV_WATCHDOG = "TORCHYARD_SUPERVISOR_WATCHDOG_S"
ENV_VICTIM_GRACE = "TORCHYARD_SUPERVISOR_VICTIM_GRACE_S"


class SupervisorState(StrEnum):
    """Where one supervisor is in its life.

    INIT       reading the launch, checking the entrypoint and the master port; torchrun not started.
    PREPARING  fetching the user's code bundle and building its environment (jobs with code), or a
               preflight that waits (for the master, or for the other nodes) longer than a moment.
    RUNNING    torchrun started; tailing, publishing, heart-beating.
    STOPPING   a stop was requested or the watchdog fired: torchrun's group got SIGTERM (or SIGKILL
               from the watchdog), SIGKILL follows after the grace period.
    COMPLETED  torchrun exited 0.                                              (final)
    FAILED     torchrun exited non-zero, never started, or was ended by the watchdog. (final)
    STOPPED    ended on request (SIGTERM/SIGINT to the supervisor).            (final)
    """

    INIT = "init"
    PREPARING = protocol.NODE_PREPARING
    RUNNING = "running"
    STOPPING = "stopping"
    COMPLETED = protocol.NODE_COMPLETED
    FAILED = protocol.NODE_FAILED
    STOPPED = protocol.NODE_STOPPED

    @property
    def is_final(self) -> bool:
        return self in (SupervisorState.COMPLETED, SupervisorState.FAILED, SupervisorState.STOPPED)


class SupervisorOutcome(TypedDict):
    """What RUN_DIR/result.json holds at least (a supervisor that could not start writes only this)."""

    state: str  # a final SupervisorState
    exit_code: int | None
    reason: str
    started_at: float  # epoch seconds
    ended_at: float


class SupervisorResultJson(SupervisorOutcome):
    """SupervisorResult as result.json holds it."""

    supervisor_pid: int
    torchrun_pid: int | None
    torchrun_started_at: float | None
    last_lines: list[LogLine]
    swept_pids: list[int]
    events_published: int
    events_dropped: dict[str, int]
    final_state_delivered: bool
    results: list[ResultEvent]


@dataclass
class SupervisorResult:
    """What RUN_DIR/result.json holds once the supervisor is done."""

    state: SupervisorState
    exit_code: int | None
    reason: str
    started_at: float
    ended_at: float
    supervisor_pid: int
    torchrun_pid: int | None = None
    torchrun_started_at: float | None = None
    last_lines: list[LogLine] = field(default_factory=list)
    swept_pids: list[int] = field(default_factory=list)
    events_published: int = 0
    events_dropped: dict[str, int] = field(default_factory=dict)
    final_state_delivered: bool = False
    results: list[ResultEvent] = field(default_factory=list)  # a function job's ranks on this node

    def to_dict(self) -> SupervisorResultJson:
        return {
            "state": self.state.value, "exit_code": self.exit_code, "reason": self.reason,
            "started_at": self.started_at, "ended_at": self.ended_at, "supervisor_pid": self.supervisor_pid,
            "torchrun_pid": self.torchrun_pid, "torchrun_started_at": self.torchrun_started_at,
            "last_lines": list(self.last_lines), "swept_pids": list(self.swept_pids),
            "events_published": self.events_published, "events_dropped": dict(self.events_dropped),
            "final_state_delivered": self.final_state_delivered, "results": list(self.results),
        }


@dataclass(frozen=True)
class SupervisorSettings:
    """Timings; the environment can override the three a test may want shorter."""

    # How often rank output and SDK events are read: half of it is what a line waits here on average.
    poll_interval_s: float = 0.05
    # How soon they are read again after a pass that published some: while ranks print, a line waits
    # here 10 ms on average rather than 25 (stream bench, paced 5,000 lines/s), for a pass (a few file
    # reads, one XADD) every 20 ms; an idle node still costs a pass per poll_interval_s.
    flowing_poll_s: float = 0.02
    # torchrun ends its workers ~0.7 s after SIGTERM; the rest is margin for slow teardown.
    stop_grace_s: float = 5.0
    # How long torchrun may outlive a failed local worker (it waits up to 30 s on the others).
    watchdog_s: float = 10.0
    # Under on_stall: recover, how long a node whose stalled ranks all wait on a peer leaves the node
    # holding them to end the attempt first (its verdict then names the culprit): time for that node
    # to read its ranks and for its report to arrive.
    victim_grace_s: float = 10.0
    final_delivery_s: float = 30.0
    last_lines: int = protocol.FAILURE_LOG_LINES

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> SupervisorSettings:
        """Defaults, with $TORCHYARD_SUPERVISOR_STOP_GRACE_S, $TORCHYARD_SUPERVISOR_WATCHDOG_S and
        $TORCHYARD_SUPERVISOR_VICTIM_GRACE_S applied."""
        environ = os.environ if environ is None else environ

        def seconds(name: str, default: float) -> float:
            raw = environ.get(name, "").strip()
            if not raw:
                return default
            value = float(raw)  # a bad value fails loudly at start, not at the first stop
            if value <= 0:
                raise ValueError(f"{name} must be positive, got {raw!r}")
            return value

        defaults = cls()
        return cls(stop_grace_s=seconds(ENV_STOP_GRACE, defaults.stop_grace_s),
                   watchdog_s=seconds(ENV_WATCHDOG, defaults.watchdog_s),
                   victim_grace_s=seconds(ENV_VICTIM_GRACE, defaults.victim_grace_s))


class StopRequested(Exception):
    """A stop arrived while the node was still preparing (raised by the supervisor's tick)."""


@dataclass(frozen=True)
class Outcome:
    state: SupervisorState
    exit_code: int | None
    reason: str
    # Retrying cannot help: the job's own function raised (the controller fails the job at once).
    fatal: bool = False
    # The ranks checkpointed and yielded to a preemption (sdk.yield_for_preemption): not a failure.
    yielded: bool = False
    # Completed, but not as cleanly as it should have (a rank ended for outliving the job's work).
    warning: str = ""


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON so that a reader sees the old file or the whole new one, never half of it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def signal_name(signum: int | None) -> str:
    if signum is None:
        return "no signal"
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def describe_exit(code: int) -> str:
    return f"was killed by {signal_name(-code)}" if code < 0 else f"exited with code {code}"
