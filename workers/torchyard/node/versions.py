"""The Python and torch versions of the training Python (`training_versions`): the agent reads them
once at start and reports them (the plan shows whether a job's machines agree), and a node's
preflight checks them against the master's (supervisor/preflight.py). Reading them may raise
PreflightError, the preflight's refusal: a node whose training Python does not run must not start
torchrun.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass

# Runs in the training Python without importing torch (1-2 s): only its installed version.
_VERSIONS_PROBE = (
    "import importlib.metadata as m, json, sys\n"
    "try:\n    torch = m.version('torch')\nexcept m.PackageNotFoundError:\n    torch = ''\n"
    "print(json.dumps({'python': '.'.join(map(str, sys.version_info[:3])), 'torch': torch}))\n"
)


class PreflightError(Exception):
    """The node must not start torchrun; the message says why in a user's words. `permanent`: a
    relaunch on the same machines would fail the same way (versions that disagree, a volume that is
    not one filesystem), so the job should fail rather than spend its restarts."""

    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent


@dataclass(frozen=True)
class Versions:
    python: str
    torch: str

    def describe(self) -> str:
        return f"torch {self.torch or '(not installed)'} on Python {self.python}"


def training_versions(python: str, timeout: float = 60.0) -> Versions:
    """The Python and torch versions of the interpreter the ranks will run with."""
    try:
        done = subprocess.run([python, "-c", _VERSIONS_PROBE], capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PreflightError(f"cannot run the training Python {python}: {exc}") from exc
    if done.returncode != 0:
        raise PreflightError(f"the training Python {python} failed: {done.stderr.strip()[-500:]}")
    data = json.loads(done.stdout.strip().splitlines()[-1])
    return Versions(python=str(data["python"]), torch=str(data["torch"]))
