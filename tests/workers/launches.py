"""The one builder of NodeLaunch values for the workers' tests: a node of a job as the controller
would send it, every field a test does not care about filled with something ordinary."""

from __future__ import annotations

from typing import Any

from torchyard.protocol import NodeLaunch

DEFAULTS: dict[str, Any] = {
    "job_id": 7,
    "attempt": 2,
    "node_id": 31,
    "node_rank": 1,
    "nnodes": 2,
    "nproc_per_node": 1,
    "master_addr": "10.0.0.5",
    "master_port": 29400,
    "entrypoint": "train.py",
}


def make_launch(**overrides: Any) -> NodeLaunch:
    """Node 1 of 2 of job 7's attempt 2, one process per node; keyword arguments override any field.
    world_size follows nnodes and nproc_per_node unless given."""
    values = {**DEFAULTS, **overrides}
    values.setdefault("world_size", values["nnodes"] * values["nproc_per_node"])
    return NodeLaunch(**values)
