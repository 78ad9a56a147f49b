from __future__ import annotations

import os

import psycopg
import pytest
import redis

from .browser import screenshot_folder
from .stack import start_stack, unique_name

PG_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


@pytest.fixture(scope="module")
def pg_stack(tmp_path_factory):
    """The production-shaped stack: PostgreSQL and the machine's Redis (a database of its own,
    emptied first), two local agents."""
    name = unique_name("torchyard_it")
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/9")
    redis.Redis.from_url(redis_url).flushdb()
    stack = start_stack(
        tmp_path_factory.mktemp("pg-stack"),
        env={"DATABASE_URL": f"postgresql://postgres@127.0.0.1:5432/{name}", "REDIS_URL": redis_url},
    )
    try:
        yield stack
    finally:
        stack.stop()
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def shots(request):
    """Where a browser test's screenshots go: var/screenshots/<test>/ in the repository."""
    return screenshot_folder(request.node.name)
