"""The Rust coordinator's storage settings name Torchyard's store when TORCHYARD_STORAGE_URL does
not: CHECKPOINT_DIR a directory, or with USE_S3=true a prefix of S3_BUCKET."""

from __future__ import annotations

from pathlib import Path

import pytest
from torchyard_server.settings.env import ConfigError, coordinator_store_url

COORDINATOR = ("CHECKPOINT_DIR", "USE_S3", "S3_BUCKET")


@pytest.fixture(autouse=True)
def clean(monkeypatch):
    for name in COORDINATOR:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(f"{name}_FILE", raising=False)


def test_unset_it_is_the_data_directorys(tmp_path):
    assert coordinator_store_url(tmp_path / "checkpoints") == (tmp_path / "checkpoints").as_uri()


def test_checkpoint_dir_is_a_directory_taken_from_where_the_server_starts(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CHECKPOINT_DIR", "./checkpoints")
    assert coordinator_store_url(Path("/elsewhere")) == (tmp_path / "checkpoints").as_uri()


@pytest.mark.parametrize(("checkpoint_dir", "url"), [
    (None, "s3://training-data"), ("./checkpoints", "s3://training-data/checkpoints"),
    ("/runs/ckpt/", "s3://training-data/runs/ckpt"),
])
def test_with_use_s3_it_is_a_prefix_of_the_bucket(monkeypatch, checkpoint_dir, url):
    monkeypatch.setenv("USE_S3", "true")
    monkeypatch.setenv("S3_BUCKET", "training-data")
    if checkpoint_dir:
        monkeypatch.setenv("CHECKPOINT_DIR", checkpoint_dir)
    assert coordinator_store_url(Path("/unused")) == url


def test_use_s3_without_a_bucket_says_what_it_needs(monkeypatch):
    monkeypatch.setenv("USE_S3", "true")
    with pytest.raises(ConfigError, match="USE_S3=true needs S3_BUCKET"):
        coordinator_store_url(Path("/unused"))
    monkeypatch.setenv("USE_S3", "false")
    assert coordinator_store_url(Path("/data")) == "file:///data"
