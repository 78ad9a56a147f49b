"""`torchyard results JOB`: a function job's per-rank results, printed (the return value's repr, or
the exception and its remote traceback), or with --out saved as `DIR/rank-<R>.pkl` to unpickle."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.text import Text

from torchyard.function_results import FunctionResults, ResultRow, first_failure

from . import CliError
from .http import ApiClient
from .output import say, size_text


def _describe(result: ResultRow, first: bool) -> Text:
    where = f"rank {result['rank']} (node {result['node_rank']} on {result['machine'] or '?'})"
    if result["ok"]:
        return Text(f"{where}: {result['repr']}  [{size_text(result['size'])}]")
    if result.get("peer_failure") and not first:
        return Text(f"{where}: a peer went away ({result['error_type']}: {result['error'][:200]})", style="dim")
    return Text(f"{where} raised {result['error_type']}: {result['error']}" + ("   <- first failure" if first else ""),
                style="bold red" if first else "red")


def show_results(api: ApiClient, job_id: int, out: Path | None, console: Console) -> int:
    """Print (or save) the results of the job's last attempt; exit code 1 when a rank raised or
    results are missing, so scripts can tell."""
    answer: FunctionResults = api.call("GET", f"/api/jobs/{job_id}/results")
    results = answer["results"]
    say(console, f"job {job_id}: {answer['function']} ({answer['status']}, attempt {answer['attempt']}): "
                 f"{len(results)} of {answer['world_size'] or '?'} result(s)")
    first = first_failure(results)
    for result in results:
        console.print(_describe(result, result is first), soft_wrap=True)
        if not result["ok"] and result["traceback"] and (result is first or not result.get("peer_failure")):
            for line in result["traceback"].rstrip().splitlines():
                say(console, f"    {line}", style="dim")
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        for result in results:
            if not result["has_value"]:
                continue
            target = out / f"rank-{int(result['rank'])}.pkl"
            with api.download(f"/api/jobs/{job_id}/results/{int(result['rank'])}") as response, \
                    open(target, "wb") as handle:
                while block := response.read(1 << 20):
                    handle.write(block)
            say(console, f"saved {target}")
    complete = answer["world_size"] is not None and len(results) == answer["world_size"]
    if answer["status"] in ("queued", "planning", "dispatching", "running", "recovering", "preempting", "preempted",
                            "stopping"):
        say(console, f"job {job_id} is still {answer['status']}: more results may come", style="dim")
        return 0
    return 0 if complete and all(r["ok"] for r in results) else 1


__all__ = ["CliError", "show_results"]
