"""PostgreSQL databases for the stacks under test, each a copy of a migrated template.

A stack's launcher migrates its database at start, as in production. From an empty database that
is every migration of every app, about two seconds of CPU on these machines, for each of the dozen
PostgreSQL stacks of a run. A copy of a database already migrated (`CREATE DATABASE ... TEMPLATE`,
a file copy inside PostgreSQL) leaves the launcher's migrate nothing to apply. The template is built
once, named after a digest of every migration and the versions of the apps that bring their own,
and kept between runs; a change of either builds a new one and drops the old. Two pytest-xdist
workers meet on an advisory lock: one builds, the other waits and copies.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[2]
PG_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
TEMPLATE_PREFIX = "torchyard_it_template_"
# Apps outside this repository with migrations of their own (Django's contrib apps among them).
MIGRATING_DISTRIBUTIONS = ("django", "django-rest-knox", "django-axes")
_LOCK_KEY = 0x7479_7464  # pg_advisory_lock key: "tytd"


def template_name() -> str:
    digest = hashlib.sha256()
    for path in sorted((ROOT / "backend").glob("torchyard_server/*/migrations/*.py")):
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    for name in MIGRATING_DISTRIBUTIONS:
        digest.update(f"{name}=={metadata.version(name)}".encode())
    return TEMPLATE_PREFIX + digest.hexdigest()[:16]


def create_database(name: str) -> None:
    """A new database `name`, migrated as far as this checkout's migrations go."""
    template = template_name()
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (_LOCK_KEY,))
        try:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (template,)).fetchone()
            if not exists:
                _build(conn, template)
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (_LOCK_KEY,))


def drop_database(name: str) -> None:
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def database(name: str) -> Iterator[str]:
    """create_database(name) for the block; its URL; dropped afterwards."""
    create_database(name)
    try:
        yield f"postgresql://postgres@127.0.0.1:5432/{name}"
    finally:
        drop_database(name)


def _build(conn: psycopg.Connection, template: str) -> None:
    """Migrate a new database and rename it to `template` (a failed build leaves no template);
    drop the templates of other digests."""
    building = f"{template}_building"
    conn.execute(f'DROP DATABASE IF EXISTS "{building}" WITH (FORCE)')
    conn.execute(f'CREATE DATABASE "{building}"')
    env = {**os.environ, "DATABASE_URL": f"postgresql://postgres@127.0.0.1:5432/{building}"}
    migrated = subprocess.run([sys.executable, str(ROOT / "backend" / "manage.py"), "migrate", "--noinput",
                               "-v", "0"], env=env, cwd=str(ROOT), capture_output=True, text=True, timeout=300)
    if migrated.returncode != 0:
        conn.execute(f'DROP DATABASE IF EXISTS "{building}" WITH (FORCE)')
        raise RuntimeError(f"migrating the test template failed:\n{migrated.stdout}\n{migrated.stderr}")
    conn.execute(f'ALTER DATABASE "{building}" RENAME TO "{template}"')
    stale = conn.execute("SELECT datname FROM pg_database WHERE datname LIKE %s AND datname <> %s",
                         (TEMPLATE_PREFIX + "%", template)).fetchall()
    for (old,) in stale:
        conn.execute(f'DROP DATABASE IF EXISTS "{old}" WITH (FORCE)')
