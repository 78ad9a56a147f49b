"""Checkpoints on a real S3 server (SeaweedFS): the manifest object is the commit marker."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch
from sdk_support import WORKERS, free_port, torchrun_argv
from torchyard.sdk import checkpoint

HERE = Path(__file__).resolve().parent


def keys(s3_server, url: str) -> list[str]:
    bucket = url.removeprefix("s3://").split("/", 1)[0]
    listing = s3_server.client().list_objects_v2(Bucket=bucket)
    return sorted(item["Key"] for item in listing.get("Contents", []))


def corrupt_object(s3_server, url: str, key: str) -> None:
    bucket = url.removeprefix("s3://").split("/", 1)[0]
    client = s3_server.client()
    data = bytearray(client.get_object(Bucket=bucket, Key=key)["Body"].read())
    data[-50] ^= 0xFF
    client.put_object(Bucket=bucket, Key=key, Body=bytes(data))


def test_it_round_trips_a_state_through_s3_with_the_documented_layout(s3_server, s3_checkpoints):
    state = {"weights": torch.randn(1000), "step": 10}
    assert checkpoint.save(state, 10, metadata={"note": "s3"})

    loaded, step, manifest = checkpoint.load_latest()
    assert step == 10 and torch.equal(loaded["weights"], state["weights"])
    assert manifest["metadata"] == {"note": "s3"} and manifest["files"][0]["path"] == "state.pt"
    assert keys(s3_server, s3_checkpoints) == [
        "jobs/7/LATEST",
        "jobs/7/step-00000010/manifest.json",
        "jobs/7/step-00000010/state.pt",
    ]


def test_it_falls_back_when_the_newest_s3_checkpoint_is_corrupt(s3_server, s3_checkpoints, capfd, save):
    for step in (1, 2):
        assert save({"step": step, "w": torch.ones(500) * step}, step)
    corrupt_object(s3_server, s3_checkpoints, "jobs/7/step-00000002/state.pt")

    state, step, _ = checkpoint.load_latest()
    assert step == 1 and state["step"] == 1
    assert "checkpoint at step 2" in capfd.readouterr().err


def test_sharded_checkpoints_upload_dcp_files_and_verify_them_on_the_way_back(s3_server, s3_checkpoints, capfd, save):
    for step in (1, 2):
        assert save({"w": torch.arange(300.0) * step, "epoch": step}, step, sharded=True)
    assert [k for k in keys(s3_server, s3_checkpoints) if "step-00000002" in k] == [
        "jobs/7/step-00000002/.metadata",
        "jobs/7/step-00000002/__0_0.distcp",
        "jobs/7/step-00000002/manifest.json",
    ]
    into = {"w": torch.zeros(300), "epoch": 0}
    assert checkpoint.load_latest(into=into)[1] == 2
    assert torch.equal(into["w"], torch.arange(300.0) * 2) and into["epoch"] == 2

    corrupt_object(s3_server, s3_checkpoints, "jobs/7/step-00000002/__0_0.distcp")
    assert checkpoint.load_latest(into=into)[1] == 1
    assert torch.equal(into["w"], torch.arange(300.0)) and into["epoch"] == 1
    assert "__0_0.distcp fails its sha256 check" in capfd.readouterr().err


def test_two_ranks_save_their_shards_to_s3_and_one_process_loads_them_whole(
    s3_server, s3_checkpoints, tmp_path, capfd
):
    out = tmp_path / "out"
    out.mkdir()
    argv = torchrun_argv(HERE / "s3_sharded_worker.py", str(out))
    env = {**os.environ, "PYTHONPATH": str(WORKERS)}
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for rank in (0, 1):
        seen = json.loads((out / f"rank-{rank}.json").read_text())
        assert seen == {"saved": [True, True], "step": 2, "local": (torch.arange(8.0) * 2)[4 * rank : 4 * rank + 4].tolist()}
    assert [k for k in keys(s3_server, s3_checkpoints) if "step-00000002" in k] == [
        "jobs/7/step-00000002/.metadata",
        "jobs/7/step-00000002/__0_0.distcp",
        "jobs/7/step-00000002/__1_0.distcp",
        "jobs/7/step-00000002/manifest.json",
    ]

    # Here, one process: it needs both shards, finds rank 1's corrupt and takes step 1 whole instead.
    corrupt_object(s3_server, s3_checkpoints, "jobs/7/step-00000002/__1_0.distcp")
    into = {"w": torch.zeros(8)}
    assert checkpoint.load_latest(into=into)[1] == 1
    assert torch.equal(into["w"], torch.arange(8.0))
    assert "__1_0.distcp fails its sha256 check" in capfd.readouterr().err


def test_retention_and_uncommitted_objects_on_s3(s3_server, s3_checkpoints, save):
    bucket = s3_checkpoints.removeprefix("s3://").split("/", 1)[0]
    # Data of a save that died before its manifest: readers ignore it, retention removes it.
    s3_server.client().put_object(Bucket=bucket, Key="jobs/7/step-00000002/state.pt", Body=b"junk")
    for step in (1, 3, 4, 5):
        assert save({"step": step}, step, keep=2)
    assert checkpoint.load_latest()[1] == 5
    assert [k for k in keys(s3_server, s3_checkpoints) if k.endswith("manifest.json")] == [
        "jobs/7/step-00000004/manifest.json",
        "jobs/7/step-00000005/manifest.json",
    ]
    assert not any("step-00000002" in k for k in keys(s3_server, s3_checkpoints))


def test_a_save_to_an_unreachable_s3_server_fails_without_raising(s3_checkpoints, monkeypatch, capfd, save):
    monkeypatch.setenv("S3_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    assert save({"step": 1}, 1) is False
    assert "not saved" in capfd.readouterr().err


def test_a_save_that_fails_on_s3_commits_nothing(s3_server, s3_checkpoints, capfd, save):
    assert save({"step": 1}, 1)
    assert save({"weights": torch.randn(1000), "fn": lambda: None}, 2) is False
    assert "checkpoint at step 2 not saved" in capfd.readouterr().err
    assert not any("step-00000002" in k for k in keys(s3_server, s3_checkpoints))
    assert checkpoint.load_latest()[1] == 1


def test_a_writer_that_breaks_mid_stream_raises_and_leaves_nothing_committed(s3_server, s3_checkpoints):
    store = checkpoint.open_store(s3_checkpoints)

    def produce(fh) -> None:
        fh.write(b"x" * (40 << 20))  # a couple of multipart parts are already on their way
        raise OSError("disk on fire")

    with pytest.raises(OSError, match="disk on fire"):
        store.write_file("step-00000003", "state.pt", produce)
    assert store.step_dirs().get("step-00000003", False) is False
    store.discard("step-00000003")
    assert not any("step-00000003" in k for k in keys(s3_server, s3_checkpoints))
