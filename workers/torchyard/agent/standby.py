"""The agent's standby supervisor (node/standby.py): one started ahead, handed the next launch.

The agent holds the write end of a pipe whose read end the standby waits on; `take` writes the run
directory and lets go of the process (the agent reaps it, as a supervisor it started itself).
`maintain` (each heartbeat round) starts a new one once the last was taken or has died. Nothing
depends on it: with none ready, a launch starts a supervisor the ordinary way.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import threading
from pathlib import Path

from torchyard.node import standby

log = logging.getLogger(__name__)


class StandbySupervisor:
    def __init__(self, log_dir: Path, env: dict[str, str] | None = None) -> None:
        self.log_dir = log_dir
        self.env = env
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._pipe: int | None = None  # our end: writing the run directory hands the launch over

    def maintain(self) -> None:
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                return
            self._forget()
            self.log_dir.mkdir(parents=True, exist_ok=True)
            read_end, write_end = os.pipe()
            try:
                with open(self.log_dir / "standby.log", "ab") as output:
                    # As runs.launch_node starts a supervisor: its own session, no stdin.
                    self._proc = subprocess.Popen(
                        standby.argv(read_end), stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
                        start_new_session=True, close_fds=True, pass_fds=(read_end,), cwd=str(self.log_dir),
                        env=self.env)
                self._pipe = write_end
            except OSError as exc:
                log.warning("cannot start a standby supervisor: %s", exc)
                os.close(write_end)
            finally:
                os.close(read_end)

    def take(self, run_dir: Path) -> int | None:
        """Hand `run_dir` to the standby; its pid, or None when there is none to take."""
        with self._lock:
            proc, pipe = self._proc, self._pipe
            if proc is None or pipe is None or proc.poll() is not None:
                return None
            self._proc, self._pipe = None, None
            try:
                data = (json.dumps({"run_dir": str(run_dir), "env": dict(os.environ)}) + "\n").encode()
                while data:
                    data = data[os.write(pipe, data):]
            except OSError:
                proc.kill()
                return None
            finally:
                os.close(pipe)
        # Reaped when it ends, as runs.launch_node reaps the supervisors it starts.
        threading.Thread(target=proc.wait, daemon=True, name=f"reap-{proc.pid}").start()
        return proc.pid

    def close(self) -> None:
        """The agent stops: the idle standby ends with it (its pipe closes)."""
        with self._lock:
            proc = self._proc
            self._forget()
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)

    def _forget(self) -> None:
        if self._pipe is not None:
            with contextlib.suppress(OSError):
                os.close(self._pipe)
        self._proc, self._pipe = None, None
