"""Job secrets at rest (JobSpec `secret_env`): sealed with Fernet (AES-128-CBC + HMAC-SHA256, from
the `cryptography` package) before the spec reaches the database, opened only to build a node's
launch. Keys come from settings.SECRET_ENV_KEYS (TORCHYARD_SECRET_ENV_KEY): the first seals, every
one opens, so a key is rotated by putting the new one first. Without one, a key derived from
SECRET_KEY (HKDF) is used, and it always opens too, so setting a key later keeps old jobs readable."""

from __future__ import annotations

import base64
from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

MASK = "***"


class SecretUnreadable(RuntimeError):
    """A sealed value none of the configured keys opens (the key changed, or SECRET_KEY did)."""


def derived_key(secret_key: str) -> bytes:
    """A Fernet key of its own from Django's SECRET_KEY: no value of SECRET_KEY itself is reused."""
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"torchyard secret_env v1")
    return base64.urlsafe_b64encode(hkdf.derive(secret_key.encode()))


@lru_cache(maxsize=4)
def _box(keys: tuple[str, ...], secret_key: str) -> MultiFernet:
    return MultiFernet([Fernet(key) for key in keys] + [Fernet(derived_key(secret_key))])


def _current() -> MultiFernet:
    return _box(tuple(settings.SECRET_ENV_KEYS), settings.SECRET_KEY)


def seal(value: str) -> str:
    return _current().encrypt(value.encode()).decode()


def unseal(token: str) -> str:
    try:
        return _current().decrypt(token.encode()).decode()
    except InvalidToken:
        raise SecretUnreadable(
            "a job secret cannot be decrypted with TORCHYARD_SECRET_ENV_KEY (or the key derived from "
            "SECRET_KEY): was a key removed?") from None


def masked(names: dict[str, str] | None) -> dict[str, str]:
    """What the API shows of a secret_env: the names, never a value (nor its ciphertext)."""
    return {name: MASK for name in names or {}}
