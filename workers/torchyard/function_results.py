"""A function job's results: the files a rank leaves (runner.py), how a node supervisor turns them
into `result` events (collect_results), and the error a caller gets back for a rank that raised.

Standard library only: the supervisor and the CLI import this without cloudpickle or torch. It sits
below both the function API (torchyard.functions) and the client, which read it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, NotRequired, TypedDict, TypeVar

from torchyard.bundles import sha256_file, size_text
from torchyard.stream_contract import ResultEvent

# Every rank writes results/rank-<R>.json (and rank-<R>.pkl, unless there is nothing to unpickle).
RESULT_FILE_SUFFIX = ".json"
RESULTS_DIR = "results"  # under the node's run directory
# A function's payload bundle: the pickle, and what the runner needs before unpickling it.
PAYLOAD_FILE = "function.pkl"
META_FILE = "function.json"
REPR_LIMIT = 2000  # characters of a value's repr (or an exception's message) the API shows
DEFAULT_RESULT_MAX_BYTES = 50 * 1024 * 1024

__all__ = ["DEFAULT_RESULT_MAX_BYTES", "first_failure", "META_FILE", "PAYLOAD_FILE", "REPR_LIMIT", "RESULTS_DIR", "RESULT_FILE_SUFFIX", "RemoteError",
           "collect_results", "result_stem", "size_text"]


class ResultFile(TypedDict):
    """What a rank leaves in results/rank-<R>.json (functions/runner.py)."""

    rank: int
    ok: bool
    size: int  # of the pickle
    repr: str  # of the value, or the exception's message: the API shows it
    error_type: str
    error: str
    traceback: str
    raised_at: NotRequired[float]  # epoch seconds
    peer_failure: NotRequired[bool]  # it raised because a peer went away


class PayloadMeta(TypedDict):
    """META_FILE: what the runner reads before unpickling the call (functions/remote.py writes it)."""

    sys_path: list[str]  # the project's folders the caller imported from, relative to the project
    name: str  # the function's qualified name
    source: str  # its file in the project ("": none there, as in a notebook)


class ResultRow(TypedDict):
    """A rank's result as GET /api/jobs/{id}/results gives it (the REST schema's FunctionResultOut)."""

    rank: int
    node_rank: int
    machine: str
    attempt: int
    ok: bool
    size: int
    sha256: str
    repr: str
    error_type: str
    error: str
    traceback: str
    raised_at: str | None  # ISO 8601
    peer_failure: bool
    has_value: bool  # a pickle to download: the return value, or the exception when it could be pickled
    created_at: str


class FunctionResults(TypedDict):
    """GET /api/jobs/{id}/results (FunctionResultsOut)."""

    function: str
    status: str
    attempt: int
    world_size: int | None
    results: list[ResultRow]  # one per rank that returned or raised, in rank order


def result_stem(rank: int) -> str:
    return f"rank-{rank}"


# A rank's result as the supervisor reads it, or as GET /api/jobs/{id}/results gives it.
AnyResult = TypeVar("AnyResult", bound=Mapping[str, object])


def first_failure(results: Sequence[AnyResult]) -> AnyResult | None:
    """The failure that explains the others: the earliest rank whose own function raised, else (every
    failure a peer's consequence, e.g. gloo's "Connection reset by peer") the earliest of all."""
    failed = [r for r in results if not r.get("ok")]
    own = [r for r in failed if not r.get("peer_failure")]
    return min(own or failed, key=lambda r: (_seconds(r.get("raised_at")), _rank(r.get("rank"))), default=None)


def _rank(rank: object) -> int:
    return rank if isinstance(rank, int) else 0


def _seconds(when: Any) -> float:
    """A result's raised_at: seconds from the runner, ISO 8601 from the API, none: last."""
    if isinstance(when, int | float) and not isinstance(when, bool):
        return float(when)
    if isinstance(when, str):
        try:
            return datetime.fromisoformat(when).timestamp()
        except ValueError:
            pass
    return float("inf")


class RemoteError(RuntimeError):
    """A rank of a function job raised (or its result could not come back).

    Carries where (`rank`, `node_rank`, `machine`), what (`error_type`, `error`) and the remote
    traceback's text (`remote_traceback`), which `str()` shows after the one-line summary.
    """

    def __init__(self, *, job_id: int, rank: int | None, node_rank: int | None, machine: str, error_type: str,
                 error: str, remote_traceback: str = "") -> None:
        self.job_id, self.rank, self.node_rank, self.machine = job_id, rank, node_rank, machine
        self.error_type, self.error, self.remote_traceback = error_type, error, remote_traceback
        where = f"rank {rank} (node {node_rank} on {machine})" if rank is not None else f"job {job_id}"
        summary = f"{where} of job {job_id} raised {error_type}: {error}" if rank is not None else \
            f"job {job_id} failed: {error}"
        text = summary + (f"\n\nremote traceback:\n{remote_traceback.rstrip()}" if remote_traceback else "")
        super().__init__(text)


def collect_results(results_dir: Path, upload: Any, destination: str) -> tuple[list[ResultEvent], list[str]]:
    """Upload every rank's pickle under `destination` (`<dest>/rank-<R>.pkl`) with `upload(path, uri)`
    and return the `result` events' payloads (one per rank, in rank order) and failures as text.

    A rank with a .json but no .pkl (an unpicklable exception, a result over the limit) still gets
    its event: the text is what explains the failure."""
    events: list[ResultEvent] = []
    failures: list[str] = []
    if not results_dir.is_dir():
        return [], []
    for meta_path in sorted(results_dir.glob(f"rank-*{RESULT_FILE_SUFFIX}"),
                            key=lambda p: int(p.stem.split("-", 1)[1]) if p.stem.split("-", 1)[1].isdigit() else -1):
        try:
            meta = json.loads(meta_path.read_text())
            rank = int(meta["rank"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            failures.append(f"{meta_path.name}: {exc}")
            continue
        event: ResultEvent = {"type": "result", "ok": meta.get("ok"), "size": meta.get("size"), "repr": meta.get("repr"),
                              "error_type": meta.get("error_type"), "error": meta.get("error"),
                              "traceback": meta.get("traceback"), "raised_at": meta.get("raised_at"),
                              "peer_failure": meta.get("peer_failure"), "rank": rank, "sha256": "", "uri": ""}
        pickled = results_dir / f"{result_stem(rank)}.pkl"
        if pickled.is_file():
            uri = f"{destination.rstrip('/')}/{result_stem(rank)}.pkl"
            try:
                event["sha256"] = sha256_file(pickled)
                upload(pickled, uri)
                event["uri"] = uri
            except Exception as exc:  # one rank's failure to upload must not lose the others
                failures.append(f"{pickled.name}: {exc}")
                if event["ok"]:
                    event["ok"], event["error_type"] = False, "ResultLost"
                    event["error"] = f"could not store the result: {exc}"
        events.append(event)
    return events, failures
