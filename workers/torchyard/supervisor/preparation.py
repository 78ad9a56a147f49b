"""The node's preparation: the user's code fetched into the machine's cache, its working directory,
its environment (torchyard.bundles.cache and torchyard.node.environments do the work; this part runs
them for one launch and streams what they say).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from torchyard import bundles
from torchyard.bundles import cache
from torchyard.node import environments
from torchyard.protocol import NodeLaunch

from . import functions
from .output_pump import OutputPump
from .states import StopRequested
from .tail import FileTail
from .volumes import check_present


@dataclass
class Prepared:
    """Where the ranks run and with which Python: the run directory and the agent's Python for a
    built-in recipe; a fresh copy of the bundle and its cached environment otherwise."""

    workdir: Path
    python: str
    function_env: dict[str, str] = field(default_factory=dict)  # a function job: where the ranks find it


class Preparation:
    """`run()` prepares one node. `tick` heartbeats and raises StopRequested on a stop; `announce(reason)`
    moves the node to `preparing` (once there is something to wait for)."""

    def __init__(self, launch: NodeLaunch, run_dir: Path, pump: OutputPump, *, python: str,
                 tick: Callable[[], None], announce: Callable[[str], None], poll_interval: float) -> None:
        self.launch = launch
        self.run_dir = run_dir
        self.pump = pump
        self.python = python
        self.tick = tick
        self.announce = announce
        self.poll_interval = poll_interval

    def run(self) -> Prepared:
        """Fetch the bundle into the machine's cache, copy it into a fresh working directory, and
        build (or reuse) the environment its requirements need. Nothing to do for a recipe."""
        launch = self.launch
        check_present(launch.volumes)  # a missing volume fails the node before any work
        if not launch.code:
            return Prepared(self.run_dir, self.python)
        sha256 = str(launch.code["bundle"])
        self.announce(f"preparing code bundle {sha256[:12]}")
        self.tick()
        cache_dir = Path(launch.cache_dir) if launch.cache_dir else self.run_dir / "cache"
        say = self.pump.prepare_line
        # Verified (by stat on a cache hit) and copied under one shared lock; heartbeats meanwhile.
        workdir = cache.bundle_workdir(cache.BundleSource.of(launch), cache_dir, self.run_dir / "work",
                                       wait=self.tick, say=say)
        prepared = Prepared(workdir, self.python)
        if launch.function:
            payload = cache.BundleSource(launch.function["payload"], launch.server_url, launch.machine_token,
                                         max_ratio=bundles.PAYLOAD_RATIO)
            prepared.function_env = functions.function_env(
                launch, self.run_dir, cache.cached_bundle(payload, cache_dir, wait=self.tick, say=say))
        requirements = environments.requirements_for(workdir, launch.pip)
        if requirements:
            prepared.python = environments.prepared_environment(
                self.python, requirements, workdir, cache_dir, pip=launch.pip,
                run=lambda argv: self._run_step(argv, workdir), say=say, wait=self.tick,
                errors=lambda: [r["line"] for r in self.pump.recent["prepare"] if "ERROR" in r["line"]],
                bundle=sha256,
            )
        self.tick()
        return prepared

    def _run_step(self, argv: list[str], cwd: Path) -> int:
        """Run one preparation command (never a shell), streaming its output as the node's log lines
        and heart-beating meanwhile; a stop request ends it."""
        log_path = self.run_dir / "prepare.log"
        with open(log_path, "ab") as output:
            start = output.tell()
            proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=output,
                                    stderr=subprocess.STDOUT, start_new_session=True,
                                    env={**os.environ, "PIP_NO_INPUT": "1"})
        tail = FileTail(log_path)
        if start:
            tail.read_lines()  # skip earlier steps' output
        try:
            while True:
                code = proc.poll()
                for line in tail.read_lines(final=code is not None):
                    self.pump.prepare_line(line, source="pip" if "pip" in argv else "prepare")
                if code is not None:
                    return code
                try:
                    self.tick()
                except StopRequested:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    raise
                time.sleep(self.poll_interval)
        finally:
            tail.close()
