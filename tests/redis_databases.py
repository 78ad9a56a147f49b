"""Which database of the machine's Redis each kind of test uses, as an offset from REDIS_URL's own
(9 under `make test`). Two users of one database would take each other's tasks, events and channel
groups, so each has its own:

- +0: a plain pytest run's tests outside tests/integration (REDIS_URL as given);
- +1, +2: the unit tier's pytest-xdist workers gw0, gw1 (xdist_redis.py);
- +3: the integration tier's shared PostgreSQL stack (integration/shared.py);
- +4: an integration module's own PostgreSQL stack.

Side-effect free: imported both by xdist_redis.py (as `tests.redis_databases`, before Django reads its
settings) and by the integration stacks."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

XDIST_WORKERS, SHARED_PG_STACK, OWN_PG_STACK = 1, 3, 4


def offset_database(url: str, offset: int) -> str:
    """`url` with its database number raised by `offset` (redis://host:6379/9, 3 -> .../12)."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{int(parts.path.strip('/') or 0) + offset}"))
