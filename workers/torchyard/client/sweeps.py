"""`torchyard sweep`: a sweep file submitted (its trial's project uploaded when it names a folder),
then followed until it ends; `torchyard sweep show|stop|resume ID` and `torchyard sweeps`."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rich.console import Console

from . import CliError
from .http import ApiClient
from .output import say
from .specfile import _parse
from .upload import upload_project

FINAL = {"stopped", "completed", "failed"}


def load_sweep_file(path: Path) -> tuple[dict[str, Any], Path | None]:
    """The sweep as the file says it, and the folder its trial's `code: {dir: ...}` names (None when
    the trial runs a built-in recipe or names an uploaded bundle)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CliError(f"{path}: {exc.strerror or exc}") from None
    sweep = _parse(path, text)
    if not isinstance(sweep, dict):
        raise CliError(f"{path}: expected a sweep mapping (name, trial, space, searcher)")
    trial = sweep.get("trial")
    code = trial.get("code") if isinstance(trial, dict) else None
    if not isinstance(code, dict) or "dir" not in code:
        return sweep, None
    folder = (path.parent / str(code["dir"])).resolve()
    if not folder.is_dir():
        raise CliError(f"{path}: trial.code.dir: {folder} is not a directory")
    return sweep, folder


def submit(api: ApiClient, path: Path, console: Console) -> dict[str, Any]:
    sweep, folder = load_sweep_file(path)
    if folder is not None:
        trial = sweep["trial"]
        entrypoint = trial.get("entrypoint")
        sha256 = upload_project(api, folder, console, entrypoint=entrypoint if isinstance(entrypoint, str) else None)
        trial["code"] = {k: v for k, v in trial["code"].items() if k != "dir"} | {"bundle": sha256}
    return api.call("POST", "/api/sweeps", sweep)


def summary(sweep: dict[str, Any]) -> str:
    counts = sweep["counts"]
    done = counts["completed"] + counts["pruned"] + counts["failed"]
    best = sweep.get("best_trial")
    metric = sweep.get("spec", {}).get("searcher", {}).get("metric", "metric")
    best_text = (f"; best: trial {best['number']} (job {best['job']}), {metric} {best['metric']:.6g}, "
                 f"{_params(best['hyperparameters'])}" if best else "")
    return (f"sweep {sweep['id']} {sweep['status']}: {done}/{counts['max_trials']} trials done ({counts['completed']} "
            f"completed, {counts['pruned']} pruned, {counts['failed']} failed), {counts['running']} running{best_text}")


def _params(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items())


def trial_lines(sweep: dict[str, Any]) -> list[str]:
    lines = []
    for t in sweep.get("trials") or []:
        value = "-" if t["value"] is None else f"{t['value']:.6g}"
        lines.append(f"  trial {t['number']:<4} job {t['job'] or '-':<6} {t['status']:<10} {value:>12}  "
                     f"{_params(t['params'])}{'  ' + t['reason'] if t['status'] in ('pruned', 'failed') else ''}")
    return lines


def follow(api: ApiClient, sweep_id: int, console: Console, every: float = 2.0) -> dict[str, Any]:
    """Print the sweep's state each time it changes, until it ends; its last state."""
    said = ""
    while True:
        sweep = api.call("GET", f"/api/sweeps/{sweep_id}")
        line = summary(sweep)
        if line != said:
            say(console, line)
            said = line
        if sweep["status"] in FINAL:
            for text in trial_lines(sweep):
                say(console, text)
            return sweep
        time.sleep(every)
