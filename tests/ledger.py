"""The test ledger: where `make test`'s time goes, printed at the end of every run and written to
var/test-ledger.json.

`--durations` charges a module's stack start to its first test and shows tests, not modules. The
ledger sums setup, call and teardown by test file (a module-scoped stack's start and stop land in
its module), lists every stack started and stopped (tests/integration/stack.py records them, with
the module that asked), and puts `make test`'s other phases beside pytest's (install, lint, the
dashboard's tests: `make test` appends each one's seconds to var/test-phases.tsv).

    {"total_seconds": ..., "phases": {"setup npm-test": s, "lint pytest-unit": s,
     "pytest unit (within lint pytest-unit)": s, "pytest integration": s}, "tests": {"passed": n, ...}, "modules": [{"module", "seconds", "tests"}],
     "stacks": [{"event": "start" | "stop" | "check" | "restart", "seconds", "module", "reason"?}],
     "workers": {"<tier> gwN": {"busy": s, "first": s, "last": s}}}
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
VAR = ROOT / "var"
LEDGER_FILE = VAR / "test-ledger.json"
# "name<TAB>seconds" lines, one a phase: `make test` writes them and names the file in this variable.
PHASES_ENV = "TORCHYARD_TEST_PHASES"
# `make test` runs pytest twice, the unit tier then the integration tier, naming each here: each run
# writes var/test-ledger.<tier>.json, and the ledger puts together every tier run so far.
TIER_ENV = "TORCHYARD_TEST_TIER"
SHOWN_MODULES = 30

_started = time.monotonic()
_modules: dict[str, float] = defaultdict(float)
_tests: dict[str, int] = defaultdict(int)
_outcomes: dict[str, int] = defaultdict(int)
_stacks: list[dict[str, Any]] = []
# Under pytest-xdist, by worker: its busy seconds (the reports' durations), and when its first and
# last reports reached the controller (seconds since the session started): a worker idle while
# another still runs shows here, where the modules' sums cannot show it.
_workers: dict[str, list[float]] = {}


def record_stack(event: str, seconds: float, reason: str = "") -> None:
    """A whole stack started, stopped, checked on a module's entry or restarted after a failed check
    (`event`: start, stop, check, restart), taking `seconds`, for the test running now."""
    current = os.environ.get("PYTEST_CURRENT_TEST", "")
    entry = {"event": event, "seconds": round(seconds, 1), "module": current.split("::")[0] or "(outside a test)"}
    if reason:
        entry["reason"] = reason
    _stacks.append(entry)


def pytest_sessionstart(session: pytest.Session) -> None:
    global _started
    _started = time.monotonic()


def pytest_sessionfinish(session: pytest.Session) -> None:
    # A pytest-xdist worker hands its stacks to its controller, which has the reports but started
    # no stack itself (pytest_testnodedown below).
    if hasattr(session.config, "workeroutput"):
        session.config.workeroutput["ledger_stacks"] = json.dumps(_stacks)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    _stacks.extend(json.loads(getattr(node, "workeroutput", {}).get("ledger_stacks", "[]")))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    module = report.nodeid.split("::")[0]
    _modules[module] += report.duration
    worker = getattr(getattr(getattr(report, "node", None), "gateway", None), "id", None)
    if worker:
        now = time.monotonic() - _started
        busy = _workers.setdefault(worker, [0.0, now - report.duration, now])
        busy[0] += report.duration
        busy[2] = now
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        _tests[module] += 1
        _outcomes["xfailed" if hasattr(report, "wasxfail") and report.skipped else report.outcome] += 1


def _phases() -> dict[str, float]:
    phases: dict[str, float] = {}
    if not os.environ.get(PHASES_ENV):
        return phases  # pytest on its own: no other phase ran
    try:
        for line in (ROOT / os.environ[PHASES_ENV]).read_text().splitlines():
            name, _, seconds = line.partition("\t")
            if name and seconds:
                phases[name] = phases.get(name, 0.0) + round(float(seconds), 1)
    except (OSError, ValueError):
        pass
    return phases


def _tiers() -> dict[str, dict[str, Any]]:
    """Every tier's own ledger that `make test` has written so far, by tier, in the order they ran."""
    found = [(path.stat().st_mtime, path) for path in VAR.glob("test-ledger.*.json")]
    tiers: dict[str, dict[str, Any]] = {}
    for _, path in sorted(found):
        with contextlib.suppress(OSError, ValueError):
            tiers[path.name.split(".")[1]] = json.loads(path.read_text())
    return tiers


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        return  # an xdist worker: its controller has every report
    own = {"seconds": round(time.monotonic() - _started, 1), "tests": dict(_outcomes),
           "modules": [{"module": m, "seconds": round(s, 1), "tests": _tests[m]} for m, s in _modules.items()],
           "stacks": _stacks,
           "workers": {w: {"busy": round(b, 1), "first": round(f, 1), "last": round(la, 1)}
                       for w, (b, f, la) in sorted(_workers.items())}}
    VAR.mkdir(exist_ok=True)
    tier = os.environ.get(TIER_ENV, "")
    if tier:
        (VAR / f"test-ledger.{tier}.json").write_text(json.dumps(own, indent=2) + "\n")
    # Under `make test` (which names its phases file and removes the tiers' files first), every tier
    # run so far; a tier or pytest run on its own, itself.
    tiers = _tiers() if tier and os.environ.get(PHASES_ENV) else {tier: own}
    made = _phases()
    # A tier that `make test` ran beside another target (`lint pytest-unit`) is inside that phase's
    # seconds: it is shown, not counted again in the total.
    inside = {name: phase for name in tiers for phase in made if f"pytest-{name}" in phase.split()}
    phases = {**made, **{f"pytest {name}".strip() + (f" (within {inside[name]})" if name in inside else ""):
                         part["seconds"] for name, part in tiers.items()}}
    total = sum(made.values()) + sum(part["seconds"] for name, part in tiers.items() if name not in inside)
    outcomes: dict[str, int] = defaultdict(int)
    for part in tiers.values():
        for outcome, count in part["tests"].items():
            outcomes[outcome] += count
    modules = sorted((row for part in tiers.values() for row in part["modules"]), key=lambda row: -row["seconds"])
    stacks = [entry for part in tiers.values() for entry in part["stacks"]]
    workers = {f"{name} {worker}".strip(): row for name, part in tiers.items()
               for worker, row in part.get("workers", {}).items()}
    ledger = {"total_seconds": round(total, 1), "phases": phases, "tests": dict(outcomes),
              "modules": modules, "stacks": stacks, "workers": workers}
    LEDGER_FILE.write_text(json.dumps(ledger, indent=2) + "\n")
    _print(terminalreporter.write_line, terminalreporter.section, ledger)


def _print(write: Any, section: Any, ledger: dict[str, Any]) -> None:
    section("test ledger (var/test-ledger.json)")
    write(f"{'phase':<60}{'seconds':>10}")
    for name, seconds in ledger["phases"].items():
        write(f"{name:<60}{seconds:>10.1f}")
    write(f"{'total':<60}{ledger['total_seconds']:>10.1f}")
    write("tests: " + ", ".join(f"{count} {outcome}" for outcome, count in sorted(ledger["tests"].items())))
    write("")
    modules = ledger["modules"]
    write(f"{'module (setup + call + teardown)':<60}{'seconds':>10}{'tests':>7}")
    for row in modules[:SHOWN_MODULES]:
        write(f"{row['module']:<60}{row['seconds']:>10.1f}{row['tests']:>7}")
    rest = modules[SHOWN_MODULES:]
    if rest:
        write(f"{f'{len(rest)} more modules':<60}{sum(r['seconds'] for r in rest):>10.1f}"
              f"{sum(r['tests'] for r in rest):>7}")
    if ledger["workers"]:
        write("")
        write(f"{'pytest-xdist worker':<60}{'busy s':>10}{'first s':>9}{'last s':>8}")
        for worker, row in ledger["workers"].items():
            write(f"{worker:<60}{row['busy']:>10.1f}{row['first']:>9.1f}{row['last']:>8.1f}")
    stacks = ledger["stacks"]
    if not stacks:
        return
    write("")
    counts = {event: [s for s in stacks if s["event"] == event] for event in ("start", "stop", "check", "restart")}
    words = {"start": "started", "stop": "stopped", "check": "checked on a module's entry", "restart": "restarted"}
    write("stacks: " + ", ".join(f"{len(entries)} {words[event]} ({sum(s['seconds'] for s in entries):.1f} s)"
                                 for event, entries in counts.items() if entries))
    for entry in counts["restart"]:
        write(f"  restarted for {entry['module']}: {entry.get('reason', '')}")
    by_module: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0, 0.0])
    for entry in stacks:
        sums = by_module[entry["module"]]
        if entry["event"] in ("start", "restart"):
            sums[0] += 1
            sums[1] += entry["seconds"]
        elif entry["event"] == "stop":
            sums[2] += entry["seconds"]
        else:
            sums[3] += entry["seconds"]
    write(f"{'module':<60}{'starts':>7}{'start s':>9}{'stop s':>8}{'check s':>9}")
    for module, (count, start_s, stop_s, check_s) in sorted(by_module.items(), key=lambda item: -item[1][1]):
        write(f"{module:<60}{int(count):>7}{start_s:>9.1f}{stop_s:>8.1f}{check_s:>9.1f}")
