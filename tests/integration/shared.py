"""Stacks shared by every integration module that only needs "a stack with two local agents", and
the network-namespace cluster shared by every module that only needs "three hosts apart".

A whole stack takes about 13 s to start and stop on these machines (a new database, seven
interpreters, two warm torch pools); a three-host cluster more (three agents in their namespaces
besides). Started once per pytest session (per xdist worker) instead of once per module, they save
minutes. The price is state left by an earlier module, so each module gets the stack through
`Shared.for_module`, which first makes it as a fresh one would be:

- no job of an earlier module is live (each is stopped, and its processes are gone);
- exactly the stack's own machines are registered (a machine an earlier module added is removed),
  each online, not drained and not quarantined; for a cluster, every link up and every agent running;

repairing what it can within REPAIR_SECONDS. A stack it cannot repair (or whose launcher died) is
stopped and started again, and the ledger says so (`restart`, with the reason). The check's own
seconds go to the ledger as `check`.

A module whose subject is the start itself (crash-only restarts, the embedded mode's restart, TLS
agents, an agent venv) or which needs another shape (three local agents, S3 storage, agents with
volumes) starts its own with `stack.start_stack` / `stack.start_pg_stack` / `netns.separate_hosts`.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Generic, TypeVar

import ledger
import requests

from .stack import FINAL_STATUSES, Stack

T = TypeVar("T")  # a Stack, or a netns.Cluster

REPAIR_SECONDS = 60.0


class Unrepairable(Exception):
    """The shared stack is not as a fresh one would be, and could not be made so in time."""


class Shared(Generic[T]):
    """One stack (or cluster) for the session: `start()` makes it, `settle(it)` makes it as fresh
    (raising Unrepairable when it cannot), `stop(it)` ends it (on leaving its `with`)."""

    def __init__(self, name: str, start: Callable[[], T], stop: Callable[[T], None],
                 settle: Callable[[T], None]) -> None:
        self.name, self._start, self._stop, self._settle = name, start, stop, settle
        self.stack: T | None = None

    def for_module(self) -> T:
        """The stack, as a fresh one would be; started (or restarted) if it must be."""
        if self.stack is None:
            self.stack = self._start()
            return self.stack
        started_at = time.monotonic()
        try:
            self._settle(self.stack)
        except (Unrepairable, requests.RequestException) as exc:
            ledger.record_stack("restart", time.monotonic() - started_at, reason=f"{self.name}: {exc}")
            self.close()
            self.stack = self._start()
        else:
            ledger.record_stack("check", time.monotonic() - started_at)
        return self.stack

    def close(self) -> None:
        if self.stack is not None:
            stack, self.stack = self.stack, None
            self._stop(stack)

    def __enter__(self) -> Shared[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def settle(stack: Stack, agents: tuple[str, ...] = ("local-0", "local-1")) -> None:
    """Stop what an earlier module left running and put the machines back as the stack made them;
    raises Unrepairable if that does not hold within REPAIR_SECONDS."""
    deadline = time.monotonic() + REPAIR_SECONDS
    stop_live_jobs(stack, deadline)

    def machines() -> dict[str, dict]:
        return {m["name"]: m for m in stack.api("GET", "/api/machines").json()}

    now = machines()
    if missing := [name for name in agents if name not in now]:
        # The launcher starts its local agents once, at its own start: nothing brings these back.
        raise Unrepairable(f"an earlier module removed {', '.join(missing)}")
    for name, machine in now.items():
        if name not in agents:
            stack.api("DELETE", f"/api/machines/{machine['id']}")  # an earlier module's joiner
        else:
            undo_marks(stack, machine)

    def as_fresh() -> bool:
        now = machines()
        return sorted(now) == sorted(agents) and all(
            m["status"] == "online" and not m["drained"] and not m.get("quarantined_at") for m in now.values())

    until(deadline, as_fresh, lambda: f"its machines are not {', '.join(agents)} online: {_brief(machines)}")


def stop_live_jobs(stack: Stack, deadline: float) -> None:
    """Stop every job still live (an earlier module's) and wait until its processes are gone."""
    if stack.process.poll() is not None:
        raise Unrepairable(f"its launcher exited with {stack.process.returncode}")
    live = [job for job in stack.api("GET", "/api/jobs").json() if job["status"] not in FINAL_STATUSES]
    for job in live:
        stack.api("POST", f"/api/jobs/{job['id']}/stop")
    for job in live:
        until(deadline, lambda job=job: stack.job(job["id"])["status"] in FINAL_STATUSES,
               f"job {job['id']} ({job['name']}) of an earlier module did not stop")
        if stack.wait_no_job_processes(job["id"], timeout=max(0.0, deadline - time.monotonic())):
            raise Unrepairable(f"job {job['id']} ({job['name']}) still has processes")


def undo_marks(stack: Stack, machine: dict) -> None:
    """Undo what an earlier module marked on a machine: drained, quarantined."""
    if machine["drained"] or machine["status"] == "draining":
        stack.api("PATCH", f"/api/machines/{machine['id']}", json={"status": "online"})
    if machine.get("quarantined_at"):
        stack.api("PATCH", f"/api/machines/{machine['id']}", json={"quarantined": False})


def until(deadline: float, done: Callable[[], bool], what: str | Callable[[], str]) -> None:
    """Wait until `done()`; Unrepairable(what) at the deadline (`what()` then, when it is a callable)."""
    while not done():
        if time.monotonic() > deadline:
            raise Unrepairable(what() if callable(what) else what)
        time.sleep(0.3)


def _brief(machines: Callable[[], dict[str, dict]]) -> str:
    with contextlib.suppress(requests.RequestException):
        return ", ".join(f"{name} {m['status']}{' drained' if m['drained'] else ''}" for name, m in machines().items())
    return "(no answer)"
