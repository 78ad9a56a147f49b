"""The one lock that serializes placement."""

from __future__ import annotations

from django.db import connection

# Any constant: the key of the one advisory lock that serializes placement on PostgreSQL.
PLACEMENT_LOCK = 7_341_001


def placement_lock() -> None:
    """Held to the end of the transaction. SQLite needs none: its IMMEDIATE transactions (settings)
    already let one writer in at a time."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [PLACEMENT_LOCK])
