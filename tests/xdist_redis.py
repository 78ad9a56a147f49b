"""A Redis database for each pytest-xdist worker, as pytest-django gives each its own test database.

The unit tier (`make pytest-unit`) loads this with `-p tests.xdist_redis`: a plugin named on the
command line is imported before pytest-django reads Django's settings, which read REDIS_URL once.
Worker gwN gets REDIS_URL's database + 1 + N (9 -> 10, 11 with `make test`'s defaults), so two
workers' streams, queues and channel groups never meet. Outside a worker it changes nothing."""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit


def _per_worker(url: str, worker: str) -> str:
    parts = urlsplit(url)
    database = int(parts.path.strip("/") or 0) + 1 + int(worker.removeprefix("gw"))
    return urlunsplit(parts._replace(path=f"/{database}"))


_worker = os.environ.get("PYTEST_XDIST_WORKER", "")
if _worker.startswith("gw") and os.environ.get("REDIS_URL"):
    os.environ["REDIS_URL"] = _per_worker(os.environ["REDIS_URL"], _worker)
