"""The node supervisor's part in a function job (launch.function): fetch the pickled function,
tell the ranks where it is and where their results go, and collect those results when the node ends.
"""

from __future__ import annotations

from pathlib import Path

from torchyard import protocol
from torchyard.function_results import (
    DEFAULT_RESULT_MAX_BYTES,
    PAYLOAD_FILE,
    RESULTS_DIR,
    collect_results,
    first_failure,
)
from torchyard.protocol import NodeLaunch
from torchyard.stream_contract import ResultEvent

from .outputs import upload_file


def results_dir(run_dir: Path) -> Path:
    return Path(run_dir) / RESULTS_DIR


def function_env(launch: NodeLaunch, run_dir: Path, payload_dir: Path) -> dict[str, str]:
    """What the runner (functions/runner.py) reads: the payload, where results go, the size limit."""
    return {
        protocol.ENV_FUNCTION_PAYLOAD: str(Path(payload_dir) / PAYLOAD_FILE),
        protocol.ENV_RESULTS_DIR: str(results_dir(run_dir)),
        protocol.ENV_RESULT_MAX_BYTES: str(int(launch.function.get("result_max_bytes") or DEFAULT_RESULT_MAX_BYTES)),
    }


def collect(launch: NodeLaunch, run_dir: Path) -> tuple[list[ResultEvent], list[str]]:
    """Every rank's result of this node, stored under the job's results folder of the store."""
    destination = f"{launch.function['results_url'].rstrip('/')}/attempt-{launch.attempt}"
    return collect_results(results_dir(run_dir), upload_file, destination)


def raised(results: list[ResultEvent]) -> ResultEvent | None:
    """The rank of this node whose own function raised first (or whose result could not come back).
    None when every failure here only says a peer went away: that is a failure like a lost node's,
    which recovery may fix."""
    failure = first_failure(results)
    return None if failure is None or failure.get("peer_failure") else failure
