"""Warming a machine's caches ahead of a job (TransformerLab's "prepare dependencies"): the bundle
fetched and unpacked, the environment of its requirements built, exactly as a node would."""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TypedDict

from torchyard.bundles.cache import OK_SUFFIX, BundleSource, PrepareError, cached_bundle, make_workdir
from torchyard.node.environments import prepared_environment, requirements_for
from torchyard.warm import pools

log = logging.getLogger(__name__)


class WarmResult(TypedDict, total=False):
    """What warm_caches did (the task's result): ok, with the bundle and the environment's Python
    (None: the machine's own), or why it failed."""

    ok: bool
    bundle: str | None
    environment: str | None
    error: str


def warm_caches(cache_dir: Path, source: BundleSource, pip: list[str], python: str = "", *,
                pool: bool = False) -> WarmResult:
    """Fetch the bundle and build its environment into the machine's cache; what a node of a job with
    this code will then find ready; with `pool` (a hot spare) the agent also keeps a warm pool of the
    Python that node would run. Returns what was done, or why it failed."""
    python = python or sys.executable
    lines: list[str] = []

    def run(argv: list[str]) -> int:
        done = subprocess.run(argv, cwd=workdir, stdin=subprocess.DEVNULL, capture_output=True, text=True)
        lines.extend((done.stdout + done.stderr).splitlines())
        return done.returncode

    cache_dir.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="warm-", dir=cache_dir))
    try:
        if source.code:
            bundle = cached_bundle(source, cache_dir, wait=lambda: None, say=log.info)
            make_workdir(bundle, workdir)
        requirements = requirements_for(workdir, pip)
        env_python = None
        if requirements:
            env_python = prepared_environment(
                python, requirements, workdir, cache_dir, pip=pip, run=run, say=log.info, wait=lambda: None,
                errors=lambda: [line for line in lines if "ERROR" in line],
            )
        if pool:
            pools.request_pool(cache_dir, env_python or python)
        return {"ok": True, "bundle": source.code.get("bundle"), "environment": env_python}
    except PrepareError as exc:
        log.warning("preparing %s failed: %s", source.code.get("bundle"), exc)
        return {"ok": False, "error": str(exc)}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def cache_summary(cache_dir: Path) -> dict[str, list[str]]:
    """What the machine has ready: bundle sha256s and environment keys (reported in heartbeats)."""
    def ready(folder: str) -> list[str]:
        return sorted(p.name.removesuffix(OK_SUFFIX) for p in (cache_dir / folder).glob(f"*{OK_SUFFIX}"))

    return {"bundles": ready("bundles"), "environments": ready("envs")}
