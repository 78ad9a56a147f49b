"""Fixtures for supervisor tests; the helpers they use live in supervisor_support.py."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
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
def make_launch(redis_url: str) -> Callable[..., NodeLaunch]:
    """Build NodeLaunch objects of one fresh job; keyword arguments override the defaults."""
    job_id = next_job_id()

    def make(**overrides) -> NodeLaunch:
        values = {
            "job_id": job_id,
            "attempt": 1,
            "node_id": 100 + overrides.get("node_rank", 0),
            "node_rank": 0,
            "nnodes": 1,
            "nproc_per_node": 1,
            "master_addr": "127.0.0.1",
            "master_port": 29500,
            "entrypoint": "scripts/allreduce.py",
            "heartbeat_interval": 0.5,
            "redis_url": redis_url,
        }
        values.update(overrides)
        values.setdefault("world_size", values["nnodes"] * values["nproc_per_node"])
        return NodeLaunch(**values)

    return make


@pytest.fixture
def supervisors(tmp_path: Path, code_root: Path, redis_url: str) -> Iterator[Supervisors]:
    """Starts supervisors; kills any still running and sweeps their jobs' processes afterwards."""
    started = Supervisors(tmp_path, code_root, redis_url)
    try:
        yield started
    finally:
        started.close()
