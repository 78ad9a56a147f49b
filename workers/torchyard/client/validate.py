"""`torchyard validate`: an installation checked end to end, as the Rust coordinator's validate.py does for its
runtime, printed as a table with one row per check.

    server      GET /api/health answers (anonymous)
    API token   the token signs in, as a staff user (the deep checks and every machine need one)
    database, redis, storage, controller, ingest
                the server's own round trips (GET /api/health/deep, web/health.py)
    agent NAME  one row per registered machine: online, a fresh heartbeat, and an answer to a ping
                sent through the broker (POST /api/network/health-check)
    code bundle, 2-node job, checkpoint, kill and recovery
                one real job (validate_job.py): the built-in recipe on two machines, its first
                checkpoint, a rank killed with SIGKILL and the job resumed from that checkpoint

Checks run in that order. The job runs only when everything before it passed (on a broken
installation it could only hang until the timeout); its rows then read `skip`. Exit status 0 when
every check passed, 1 when one failed (the first is named, with its cause), 2 for a usage error.
The job validate started is stopped if it still runs, and deleted when every check passed (kept
with `--keep`, and kept when a check failed, for `torchyard logs JOB`).
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import TypedDict

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from . import CliError
from .http import ApiClient
from .output import say
from .validate_job import ValidationJob

PASS, FAIL, SKIP = "pass", "fail", "skip"
STYLES = {PASS: "green", FAIL: "bold red", SKIP: "dim"}
DEEP_CHECKS = ("database", "redis", "storage", "controller", "ingest")
JOB_CHECKS = ("code bundle", "2-node job", "checkpoint", "kill and recovery")


class DeepCheck(TypedDict, total=False):
    name: str
    ok: bool
    detail: str
    ms: float


class DeepHealth(TypedDict, total=False):
    """GET /api/health/deep (DeepHealthOut), failing (503) or not."""

    status: str  # "ok" or "failing"
    checks: list[DeepCheck]


class WorkerShown(TypedDict, total=False):
    """What an agent's row reads of a machine of GET /api/cluster/workers (WorkerOut)."""

    id: int
    name: str
    host: str
    status: str
    healthy: bool  # its agent reports, and its last heartbeat is recent
    drained: bool
    heartbeat_age_seconds: float | None  # null: it never reported
    cpu_count: int
    gpus: list[object]  # counted only


class PingShown(TypedDict, total=False):
    """A machine's answer in POST /api/network/health-check (HealthCheckResultOut); {}: none."""

    machine_id: int
    reachable: bool
    rtt_ms: float | None


class CheckFailed(Exception):
    """A check that ran and found something wrong; the message is its cause."""


@dataclass
class Check:
    name: str
    result: str  # PASS, FAIL or SKIP
    detail: str
    seconds: float


class Validation:
    """The checks in order, each recorded as it ends."""

    def __init__(self, api: ApiClient, progress: Console, *, timeout: float, keep: bool) -> None:
        self.api, self.progress, self.timeout, self.keep = api, progress, timeout, keep
        self.checks: list[Check] = []
        self.job_id: int | None = None
        self.job_kept = False

    # --- bookkeeping ------------------------------------------------------------------------------
    @property
    def failed(self) -> Check | None:
        return next((c for c in self.checks if c.result == FAIL), None)

    def record(self, name: str, result: str, detail: str, seconds: float = 0.0) -> None:
        self.checks.append(Check(name, result, detail, round(seconds, 2)))

    @contextlib.contextmanager
    def check(self, name: str) -> Iterator[list[str]]:
        """Run the body as check `name`: it appends its detail to the list it is given; CheckFailed
        (or the API client's CliError) fails the check with that cause."""
        detail: list[str] = []
        started = time.monotonic()
        status = self.progress.status(Text(f"checking {name} ...")) if self.progress.is_terminal \
            else contextlib.nullcontext()
        try:
            with status:
                yield detail
        except (CheckFailed, CliError) as exc:
            self.record(name, FAIL, str(exc).strip(), time.monotonic() - started)
        else:
            self.record(name, PASS, "; ".join(detail), time.monotonic() - started)

    def skip(self, names: tuple[str, ...] | list[str], why: str) -> None:
        for name in names:
            self.record(name, SKIP, why)

    # --- the checks -------------------------------------------------------------------------------
    def run(self) -> None:
        with self.check("server") as detail:
            answer = self.api.call("GET", "/api/health", anonymous=True)
            if not isinstance(answer, dict) or answer.get("status") != "ok":
                raise CheckFailed(f"GET /api/health answered {answer!r}, not {{'status': 'ok'}}")
            detail.append(f"{self.api.server} answers /api/health")
        if self.failed:
            return self.skip(["API token", *DEEP_CHECKS, "agents", *JOB_CHECKS], "the server does not answer")
        with self.check("API token") as detail:
            me = self.api.call("GET", "/api/auth/me")
            if not me.get("is_staff"):
                raise CheckFailed(f"{me.get('username')} is not staff: validate needs a staff user's token "
                                  f"(the deep health checks and every machine)")
            detail.append(f"signed in as {me.get('username')} (staff)")
        if self.failed:
            return self.skip([*DEEP_CHECKS, "agents", *JOB_CHECKS], "no usable API token")
        self.deep_checks()
        self.agent_checks()
        if self.failed:
            return self.skip(JOB_CHECKS, f"an earlier check failed ({self.failed.name})")
        self.job_checks()

    def deep_checks(self) -> None:
        started = time.monotonic()
        try:
            answer = self._deep_health()
        except CliError as exc:
            self.record("deep health", FAIL, str(exc).strip(), time.monotonic() - started)
            return
        for entry in answer.get("checks") or []:
            self.record(str(entry.get("name")), PASS if entry.get("ok") else FAIL, str(entry.get("detail") or ""),
                        float(entry.get("ms") or 0) / 1000)

    def _deep_health(self) -> DeepHealth:
        """GET /api/health/deep, whose failing answer (503) carries the checks as a passing one does."""
        request = urllib.request.Request(self.api.server + "/api/health/deep",
                                         headers={**self.api.auth_headers(), "Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return json.load(response)
        except urllib.error.HTTPError as exc:
            if exc.code == 503:
                return json.load(exc)
            if exc.code == 404:
                raise CliError("the server has no /api/health/deep (older than this CLI?)") from None
            raise CliError(f"GET /api/health/deep: HTTP {exc.code}") from None
        except (OSError, ValueError) as exc:
            raise CliError(f"GET /api/health/deep: {getattr(exc, 'reason', exc)}") from None

    def agent_checks(self) -> None:
        started = time.monotonic()
        try:
            workers: list[WorkerShown] = self.api.call("GET", "/api/cluster/workers")
            pings: dict[int, PingShown] = {
                r["machine_id"]: r for r in self.api.call("POST", "/api/network/health-check")["results"]}
        except CliError as exc:
            self.record("agents", FAIL, str(exc).strip(), time.monotonic() - started)
            return
        seconds = time.monotonic() - started
        if not workers:
            self.record("agents", FAIL, "no machine is registered: add one (`POST /api/machines`, or the "
                        "dashboard's Machines page) and start its agent", seconds)
            return
        for worker in workers:
            result, detail = agent_verdict(worker, pings.get(worker["id"]) or PingShown())
            self.record(f"agent {worker['name']}", result, detail, seconds / len(workers))

    def job_checks(self) -> None:
        placeable = [c for c in self.checks if c.name.startswith("agent ")
                     and not any(word in c.detail for word in ("draining", "quarantined"))]
        if len(placeable) < 2:
            self.record("2-node job", FAIL, f"a 2-node job needs two machines with live agents; there is "
                        f"{len(placeable)}")
            return self.skip([n for n in JOB_CHECKS if n != "2-node job"], "no 2-node job")
        job = ValidationJob(self.api, timeout=self.timeout)
        steps: list[tuple[str, Callable[[], str]]] = [
            ("code bundle", job.upload), ("2-node job", job.start), ("checkpoint", job.first_checkpoint),
            ("kill and recovery", job.recovery),
        ]
        try:
            for position, (name, step) in enumerate(steps):
                with self.check(name) as detail:
                    try:
                        detail.append(step())
                    except ValidationJob.Failed as exc:
                        raise CheckFailed(str(exc)) from None
                    finally:
                        self.job_id = job.job_id
                if self.failed:
                    self.skip([n for n, _ in steps[position + 1:]], f"an earlier check failed ({name})")
                    break
        finally:
            # Whatever happened (a failed check, Ctrl-C), the job validate started does not run on.
            self.job_kept = job.clean_up(delete=not self.failed and not self.keep)


def agent_verdict(worker: WorkerShown, ping: PingShown) -> tuple[str, str]:
    """One machine's row: PASS only with status up, a fresh heartbeat (the server's `healthy`) and
    an answer to the ping."""
    status, age = worker.get("status"), worker.get("heartbeat_age_seconds")
    heard = "its agent never connected" if age is None else f"last heartbeat {age:.1f} s ago"
    pinged = f"ping answered in {ping['rtt_ms']:.0f} ms" if ping.get("reachable") else \
        "no answer to a ping through the broker"
    if status == "pending":
        return FAIL, f"pending: {heard} (start `torchyard agent --server URL --token TOKEN` on {worker.get('host')})"
    if not worker.get("healthy"):
        return FAIL, f"{status}: {heard}; {pinged}"
    if not ping.get("reachable"):
        return FAIL, f"{status}, {heard}, but {pinged}"
    gpus = len(worker.get("gpus") or [])
    return PASS, (f"{status}{' (draining)' if worker.get('drained') else ''}, {heard}, {pinged}; "
                  f"{worker.get('cpu_count')} CPUs, {gpus} GPU{'s' if gpus != 1 else ''}")


# --- output ---------------------------------------------------------------------------------------
def checks_table(checks: list[Check]) -> Table:
    table = Table(box=box.SIMPLE, title_justify="left")
    table.add_column("check", no_wrap=True)
    table.add_column("result", no_wrap=True)
    table.add_column("seconds", justify="right", no_wrap=True)
    table.add_column("detail", overflow="fold")
    for c in checks:
        table.add_row(Text(c.name), Text(c.result.upper(), style=STYLES[c.result]),
                      Text(f"{c.seconds:.2f}" if c.result != SKIP else "-"), Text(c.detail))
    return table


def summary(validation: Validation) -> str:
    failed = validation.failed
    if failed is None:
        line = f"PASSED: all {len(validation.checks)} checks"
    else:
        line = f"FAILED: {failed.name}: {failed.detail}"
    if validation.job_kept and validation.job_id is not None:
        line += f"\nvalidation job #{validation.job_id} kept: `torchyard logs {validation.job_id}`"
    return line


def validate(api: ApiClient, console: Console, *, as_json: bool, keep: bool, timeout: float) -> int:
    validation = Validation(api, Console(stderr=True), timeout=timeout, keep=keep)
    validation.run()
    failed = validation.failed
    if as_json:
        print(json.dumps({
            "ok": failed is None, "server": api.server,
            "first_failure": {"check": failed.name, "cause": failed.detail} if failed else None,
            "job": validation.job_id, "job_kept": validation.job_kept,
            "checks": [asdict(c) for c in validation.checks],
        }, indent=2))
    else:
        console.print(checks_table(validation.checks))
        say(console, summary(validation), "bold green" if failed is None else "bold red")
    return 0 if failed is None else 1
