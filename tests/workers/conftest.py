"""Fixtures for supervisor tests; the helpers they use live in supervisor_support.py, the NodeLaunch
builder in launches.py."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from launches import make_launch
from supervisor_support import SCRIPTS, Supervisors, next_job_id
from torchyard.protocol import NodeLaunch


@pytest.fixture
def code_root(tmp_path: Path) -> Path:
    """A code root holding the test scripts under scripts/, given to supervisors as $TORCHYARD_CODE_ROOT."""
    root = tmp_path / "code"
    (root / "scripts").mkdir(parents=True)
    for name, source in SCRIPTS.items():
        (root / "scripts" / name).write_text(source)
    return root


@pytest.fixture
def job_launch(redis_url: str) -> Callable[..., NodeLaunch]:
    """NodeLaunch values (launches.make_launch) of one fresh job run on this host: its master on
    loopback, scripts/allreduce.py, quick heartbeats, this session's Redis; keyword arguments
    override any of it."""
    job_id = next_job_id()

    def make(**overrides) -> NodeLaunch:
        values = {"job_id": job_id, "attempt": 1, "node_rank": 0, "nnodes": 1, "master_addr": "127.0.0.1",
                  "master_port": 29500, "entrypoint": "scripts/allreduce.py", "heartbeat_interval": 0.5,
                  "redis_url": redis_url, **overrides}
        values.setdefault("node_id", 100 + values["node_rank"])
        return make_launch(**values)

    return make


@pytest.fixture
def supervisors(tmp_path: Path, code_root: Path, redis_url: str) -> Iterator[Supervisors]:
    """Starts supervisors; kills any still running and sweeps their jobs' processes afterwards."""
    started = Supervisors(tmp_path, code_root, redis_url)
    try:
        yield started
    finally:
        started.close()
