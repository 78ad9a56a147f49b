"""Small typed readers for settings from the environment. They fail loudly on bad values."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TypeVar

N = TypeVar("N", int, float)


class ConfigError(RuntimeError):
    pass


def env_str(name: str, default: str = "") -> str:
    """A string setting; NAME_FILE (a path) wins, so secrets can come from mounted files."""
    file_path = os.environ.get(f"{name}_FILE")
    if file_path:
        try:
            return Path(file_path).read_text().strip()
        except OSError as exc:
            raise ConfigError(f"{name}_FILE={file_path!r} cannot be read: {exc}") from exc
    return os.environ.get(name, default)


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name}={raw!r} is not a boolean (use true/false)")


def env_int(name: str, default: int) -> int:
    return _env_number(name, default, int, "an integer")


def env_float(name: str, default: float) -> float:
    return _env_number(name, default, float, "a number")


def _env_number(name: str, default: N, parse: type[N], what: str) -> N:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return parse(raw)
    except ValueError as exc:
        raise ConfigError(f"{name}={raw!r} is not {what}") from exc


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def coordinator_store_url(default_dir: Path) -> str:
    """The store the Rust coordinator's settings name: with USE_S3=true, S3_BUCKET (CHECKPOINT_DIR,
    when given, a prefix in it); else CHECKPOINT_DIR (a directory); else ``default_dir``."""
    checkpoint_dir = env_str("CHECKPOINT_DIR").strip()
    if env_bool("USE_S3"):
        bucket = env_str("S3_BUCKET").strip()
        if not bucket:
            raise ConfigError("USE_S3=true needs S3_BUCKET (the bucket checkpoints go to)")
        prefix = checkpoint_dir.strip("/").removeprefix("./").strip("/")
        return f"s3://{bucket}/{prefix}".rstrip("/")
    return (Path(checkpoint_dir).resolve() if checkpoint_dir else default_dir).as_uri()
