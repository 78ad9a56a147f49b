"""The test ledger: where `make test`'s time goes, printed at the end of every run and written to
var/test-ledger.json.

`--durations` charges a module's stack start to its first test and shows tests, not modules. The
ledger sums setup, call and teardown by test file (a module-scoped stack's start and stop land in
its module), lists every stack started and stopped (tests/integration/stack.py records them, with
the module that asked), and puts `make test`'s other phases beside pytest's (install, lint, the
dashboard's tests: `make test` appends each one's seconds to var/test-phases.tsv).

    {"total_seconds": ..., "phases": {"install": s, "lint": s, "npm-test": s, "pytest": s},
     "tests": {"passed": n, ...}, "modules": [{"module", "seconds", "tests"}], "stacks": [...]}
"""

from __future__ import annotations

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
SHOWN_MODULES = 30

_started = time.monotonic()
_modules: dict[str, float] = defaultdict(float)
_tests: dict[str, int] = defaultdict(int)
_outcomes: dict[str, int] = defaultdict(int)
_stacks: list[dict[str, Any]] = []


def record_stack(event: str, seconds: float) -> None:
    """A whole stack started or stopped (`event`), taking `seconds`, for the test running now."""
    current = os.environ.get("PYTEST_CURRENT_TEST", "")
    _stacks.append({"event": event, "seconds": round(seconds, 1),
                    "module": current.split("::")[0] or "(outside a test)"})


def pytest_sessionstart(session: pytest.Session) -> None:
    global _started
    _started = time.monotonic()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    module = report.nodeid.split("::")[0]
    _modules[module] += report.duration
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


def pytest_terminal_summary(terminalreporter: Any) -> None:
    pytest_seconds = round(time.monotonic() - _started, 1)
    phases = {**_phases(), "pytest": pytest_seconds}
    modules: list[dict[str, Any]] = sorted(
        ({"module": m, "seconds": round(s, 1), "tests": _tests[m]} for m, s in _modules.items()),
        key=lambda entry: -entry["seconds"])
    ledger = {"total_seconds": round(sum(phases.values()), 1), "phases": phases, "tests": dict(_outcomes),
              "modules": modules, "stacks": _stacks}
    VAR.mkdir(exist_ok=True)
    LEDGER_FILE.write_text(json.dumps(ledger, indent=2) + "\n")

    write = terminalreporter.write_line
    terminalreporter.section("test ledger (var/test-ledger.json)")
    write(f"{'phase':<60}{'seconds':>10}")
    for name, seconds in phases.items():
        write(f"{name:<60}{seconds:>10.1f}")
    write(f"{'total':<60}{ledger['total_seconds']:>10.1f}")
    write("")
    write(f"{'module (setup + call + teardown)':<60}{'seconds':>10}{'tests':>7}")
    for row in modules[:SHOWN_MODULES]:
        write(f"{row['module']:<60}{row['seconds']:>10.1f}{row['tests']:>7}")
    rest = modules[SHOWN_MODULES:]
    if rest:
        write(f"{f'{len(rest)} more modules':<60}{sum(r['seconds'] for r in rest):>10.1f}"
              f"{sum(r['tests'] for r in rest):>7}")
    if _stacks:
        write("")
        starts = [s for s in _stacks if s["event"] == "start"]
        stops = [s for s in _stacks if s["event"] == "stop"]
        write(f"stacks: {len(starts)} started ({sum(s['seconds'] for s in starts):.1f} s), "
              f"{len(stops)} stopped ({sum(s['seconds'] for s in stops):.1f} s)")
        by_module: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
        for entry in _stacks:
            sums = by_module[entry["module"]]
            if entry["event"] == "start":
                sums[0] += 1
                sums[1] += entry["seconds"]
            else:
                sums[2] += entry["seconds"]
        write(f"{'module':<60}{'starts':>7}{'start s':>9}{'stop s':>8}")
        for module, (count, start_s, stop_s) in sorted(by_module.items(), key=lambda item: -item[1][1]):
            write(f"{module:<60}{int(count):>7}{start_s:>9.1f}{stop_s:>8.1f}")
