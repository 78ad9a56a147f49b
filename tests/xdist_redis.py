"""A Redis database for each pytest-xdist worker, as pytest-django gives each its own test database.

The unit tier (`make pytest-unit`) loads this with `-p tests.xdist_redis`: a plugin named on the
command line is imported before pytest-django reads Django's settings, which read REDIS_URL once.
Worker gwN gets REDIS_URL's database + 1 + N (redis_databases.py: 9 -> 10, 11 with `make test`'s
defaults). Outside a worker it changes nothing."""

from __future__ import annotations

import os

from tests.redis_databases import XDIST_WORKERS, offset_database

_worker = os.environ.get("PYTEST_XDIST_WORKER", "")
if _worker.startswith("gw") and os.environ.get("REDIS_URL"):
    os.environ["REDIS_URL"] = offset_database(os.environ["REDIS_URL"], XDIST_WORKERS + int(_worker.removeprefix("gw")))
