"""`python -m torchyard.supervisor RUN_DIR`: supervise one node of one attempt.

RUN_DIR/launch.json holds a NodeLaunch (protocol.NodeLaunch.to_dict(), redis_url filled in). The
agent starts this detached and stops it with SIGTERM to the pid in RUN_DIR/supervisor.pid.

Exit status: 0 completed, 1 failed, 2 unreadable launch or bad settings, 143 stopped (the shell's code for SIGTERM).
The authoritative outcome is RUN_DIR/result.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

from torchyard.node import standby
from torchyard.protocol import NodeLaunch

from .argv import LAUNCH_FILE, RESULT_FILE, default_code_root
from .publisher import EventPublisher, connect
from .states import SupervisorOutcome, SupervisorSettings, SupervisorState, write_json_atomic
from .supervisor import NodeSupervisor

log = logging.getLogger("torchyard.supervisor")

EXIT_CODES = {SupervisorState.COMPLETED: 0, SupervisorState.FAILED: 1, SupervisorState.STOPPED: 143}
EXIT_BAD_LAUNCH = 2


def load_launch(run_dir: Path) -> NodeLaunch:
    """Read RUN_DIR/launch.json; raises OSError or ValueError when it is missing or malformed."""
    data = json.loads((run_dir / LAUNCH_FILE).read_text())
    if not isinstance(data, dict):
        raise ValueError(f"{LAUNCH_FILE} does not hold a JSON object")
    try:
        return NodeLaunch.from_dict(data)
    except TypeError as exc:  # a required field is missing
        raise ValueError(f"{LAUNCH_FILE}: {exc}") from exc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m torchyard.supervisor", description=__doc__.splitlines()[0]
    )
    # A standby's only positional argument is room for the run directory it will show (node/standby.py).
    parser.add_argument("run_dir", type=Path, nargs="?", help="the node's run directory, holding launch.json")
    parser.add_argument(standby.STANDBY_ARG, type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.standby_fd is not None:
        # Started ahead (node/standby.py): everything is imported; wait for the agent to name the node.
        taken = standby.wait_for_launch(args.standby_fd)
        if taken is None:
            return 0
        args.run_dir = taken
    elif args.run_dir is None:
        parser.error("the run directory is required")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    run_dir = args.run_dir.resolve()
    try:
        launch = load_launch(run_dir)
        settings = SupervisorSettings.from_env()
    except (OSError, ValueError) as exc:
        # Without a launch there is no Redis URL to report to: result.json is the only trace.
        log.error("cannot start: %s", exc)
        if run_dir.is_dir():
            now = time.time()
            failure: SupervisorOutcome = {
                "state": SupervisorState.FAILED.value,
                "exit_code": None,
                "reason": f"supervisor cannot start: {exc}",
                "started_at": now,
                "ended_at": now,
            }
            write_json_atomic(run_dir / RESULT_FILE, failure)
        return EXIT_BAD_LAUNCH
    if not launch.redis_url:
        log.warning("launch has no redis_url: events go nowhere, only result.json will tell")
    publisher = EventPublisher(launch, connect(launch.redis_url) if launch.redis_url else None)
    supervisor = NodeSupervisor(
        launch, run_dir, publisher=publisher, code_root=default_code_root(), settings=settings
    )
    supervisor.install_signal_handlers()
    result = supervisor.run()
    return EXIT_CODES[result.state]


if __name__ == "__main__":
    sys.exit(main())
