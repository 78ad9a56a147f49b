"""Fixtures of the SDK tests: a real SeaweedFS S3 server, an isolated environment per test."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sdk_support import WORKERS, SeaweedS3  # noqa: E402

if str(WORKERS) not in sys.path:
    sys.path.insert(0, str(WORKERS))

# Variables that would leak a launcher's or a developer's setup into the SDK under test.
SDK_ENV = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHYARD_JOB_ID",
    "TORCHYARD_ATTEMPT",
    "TORCHYARD_NODE_RANK",
    "TORCHYARD_EVENT_SOCKET",
    "TORCHYARD_CONFIG",
    "TORCHYARD_CHECKPOINT_URL",
    "TORCHYARD_RESUME_MANIFEST",
    "TORCHYARD_DIST_BACKEND",
    "TORCHYARD_TEST_PAUSE_BEFORE_COMMIT",
    "TORCHYARD_TEST_PAUSE_AFTER_WRITE",
)


@pytest.fixture(autouse=True)
def clean_sdk_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """Every test starts as a plain single process whose checkpoints go to its own tmp dir."""
    from torchyard.sdk import events

    for name in SDK_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TORCHYARD_CHECKPOINT_URL", str(tmp_path / "checkpoints"))
    # The event channel is built once per process from the environment: rebuild it per test.
    monkeypatch.setattr(events, "_channel", None)
    monkeypatch.setattr(events, "_total_steps", None)
    yield
    if events._channel is not None:
        events._channel.close()


@pytest.fixture
def s3_checkpoints(s3_server: SeaweedS3, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh bucket, with the SDK's environment pointing its checkpoints at it; returns the URL."""
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    url = f"s3://{s3_server.create_bucket()}/jobs/7"
    monkeypatch.setenv("TORCHYARD_CHECKPOINT_URL", url)
    return url


@pytest.fixture(params=["sync", "async"])
def save(request):
    """checkpoint.save, or an async save waited for at once: a test that saves through this fixture
    runs twice, and async saves must keep every promise of synchronous ones (same True or False)."""
    from torchyard.sdk import checkpoint

    if request.param == "sync":
        return checkpoint.save

    def save_async(state, step, **options):
        pending = checkpoint.save(state, step, async_=True, **options)
        assert isinstance(pending, checkpoint.PendingSave)
        return pending.result(timeout=120)

    save_async.is_async = True  # type: ignore[attr-defined]
    return save_async
