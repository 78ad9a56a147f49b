"""The lighthouse of a `fault_tolerance.mode: in_place` job: torchft's quorum server, which every
rank's Manager asks before each step who is alive (sdk/resilient.py).

Node 0's warm launcher starts it, forked from the warm pool like a rank (torch and torchft load in
milliseconds there), on the job's master address and port: an in_place job's ranks make no process
group of their own on that port. It outlives any rank's death, which is the point, and ends with the
node's launcher (SIGTERM).

    python -m torchyard.warm.lighthouse HOST:PORT MIN_REPLICAS
"""

from __future__ import annotations

import signal
import sys

# How often the lighthouse looks for a quorum, and how long a replica may go without a heartbeat
# before it is counted out (its process is gone: the launcher replaces it).
QUORUM_TICK_MS = 100
HEARTBEAT_TIMEOUT_MS = 5000


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or not args[1].isdigit():
        print("usage: python -m torchyard.warm.lighthouse HOST:PORT MIN_REPLICAS", file=sys.stderr)
        return 2
    bind, min_replicas = args[0], int(args[1])
    from torchft._torchft import LighthouseServer

    stop = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop)  # before its threads start: they inherit the mask
    server = LighthouseServer(bind=bind, min_replicas=min_replicas, join_timeout_ms=QUORUM_TICK_MS,
                              quorum_tick_ms=QUORUM_TICK_MS, heartbeat_timeout_ms=HEARTBEAT_TIMEOUT_MS)
    print(f"[torchyard warm] in_place lighthouse for {min_replicas} ranks on {bind}", file=sys.stderr, flush=True)
    signal.sigwait(stop)
    server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
