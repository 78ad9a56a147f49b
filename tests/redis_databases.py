"""Which database of the machine's Redis each kind of test uses, as an offset from REDIS_URL's own
(9 under `make test`). Two users of one database would take each other's tasks, events and channel
groups, so each has its own:

- +0: a plain pytest run's tests outside tests/integration (REDIS_URL as given);
- +1, +2: the unit tier's pytest-xdist workers gw0, gw1 (xdist_redis.py);
- the integration tier, which runs after the unit tier (never beside it) and empties each database
  its stacks use before they start: +1, +2 for its worker gw0 (or a run without workers), its shared
  PostgreSQL stack (integration/shared.py), then a module's own PostgreSQL stack; +3, +4 for gw1;
  +5, +6 for gw2.

Redis has 16 databases (0-15): from `make test`'s 9 the plan ends at 15, which is why the unit tier
has two workers at most and the integration tier three (`offset_database` says so rather than wrap
around).

Side-effect free: imported both by xdist_redis.py (as `tests.redis_databases`, before Django reads its
settings) and by the integration stacks."""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

XDIST_WORKERS = 1
# Worker gw0's; worker gwN's are these + 2N (stack_offset).
SHARED_PG_STACK, OWN_PG_STACK = 1, 2
REDIS_DATABASES = 16  # a Redis server's default `databases`


def worker_index() -> int:
    """N of the pytest-xdist worker gwN running this process; 0 outside a worker."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(worker.removeprefix("gw")) if worker.startswith("gw") else 0


def stack_offset(kind: int) -> int:
    """The offset of an integration stack of `kind` (SHARED_PG_STACK, OWN_PG_STACK) for this worker."""
    return kind + 2 * worker_index()


def offset_database(url: str, offset: int) -> str:
    """`url` with its database number raised by `offset` (redis://host:6379/9, 3 -> .../12)."""
    parts = urlsplit(url)
    number = int(parts.path.strip("/") or 0) + offset
    if number >= REDIS_DATABASES:
        raise RuntimeError(f"{url} + {offset} is Redis database {number}, past the server's {REDIS_DATABASES}: "
                           "start from a lower REDIS_URL database or run fewer pytest-xdist workers")
    return urlunsplit(parts._replace(path=f"/{number}"))
