"""Signed, expiring grants: one machine may fetch one bundle before any job of it is placed there
(a hot spare warming its cache). The control side signs them; the agent route checks them."""

from __future__ import annotations

from django.core import signing

GRANT_SALT = "torchyard.bundle-grant"
GRANT_MAX_AGE = 3600


def bundle_grant(*, sha256: str, machine_id: int) -> str:
    """A signed, expiring permission for one machine to fetch one bundle before any job of it is
    placed there (prepare_dependencies)."""
    return signing.dumps({"bundle": sha256, "machine": machine_id}, salt=GRANT_SALT)


def bundle_granted(raw: str, *, sha256: str, machine_id: int) -> bool:
    """Whether `raw` (the X-Torchyard-Grant header) grants this machine this bundle."""
    if not raw:
        return False
    try:
        grant = signing.loads(raw, salt=GRANT_SALT, max_age=GRANT_MAX_AGE)
    except signing.BadSignature:
        return False
    return grant == {"bundle": sha256, "machine": machine_id}
