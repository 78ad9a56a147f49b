"""sdk.data.line_shards: shard files round-robin by rank, read line by line from a directory or S3
(cached), with a position that resumes at the next line: none read twice, none skipped."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sdk_support import S3_KEY, S3_SECRET, WORKERS, torchrun_argv
from torchyard import sdk
from torchyard.sdk.data import line_shards

WORKER = WORKERS / "torchyard" / "examples" / "seed001_worker.py"


def make_shards(folder: Path, lengths: list[int]) -> dict[str, list[str]]:
    """Shard files of these line counts, written in reverse name order; their lines by file."""
    folder.mkdir(parents=True, exist_ok=True)
    shards = {f"part-{i:02d}.txt": [f"{i}-{j} some text" for j in range(n)] for i, n in enumerate(lengths)}
    for name in sorted(shards, reverse=True):
        (folder / name).write_text("".join(f"{line}\n" for line in shards[name]))
    return shards


def take(stream, count: int) -> list[str]:
    return [next(stream) for _ in range(count)]


def test_ranks_read_the_sorted_files_round_robin_every_line_once(tmp_path):
    shards = make_shards(tmp_path / "data", [3, 0, 5, 2, 4])
    (tmp_path / "data" / ".hidden").write_text("not a shard\n")
    (tmp_path / "data" / "nested").mkdir()
    names = sorted(shards)
    read = {rank: list(line_shards(tmp_path / "data", rank=rank, world_size=3)) for rank in range(3)}
    for rank in range(3):
        assert read[rank] == [line for name in names[rank::3] for line in shards[name]]
    every = [line for lines in read.values() for line in lines]
    assert sorted(every) == sorted(line for lines in shards.values() for line in lines)
    assert list(line_shards(tmp_path / "data", pattern="part-0[03]*")) == shards["part-00.txt"] + shards["part-03.txt"]


def test_a_resume_from_the_checkpointed_state_goes_on_at_the_next_line(tmp_path):
    shards = make_shards(tmp_path / "data", [4, 3, 5, 2])
    readers = [line_shards(tmp_path / "data", rank=r, world_size=2) for r in range(2)]
    streams = [iter(r) for r in readers]
    # Rank 0 stops inside its first shard, rank 1 right at the end of its first one.
    before = [take(streams[0], 2), take(streams[1], 3)]
    assert readers[0].last_id == "part-00.txt:1" and readers[0].position.line_idx == 2
    assert readers[1].position.shard_idx == 1 and readers[1].position.step == 3
    states = [r.state_dict() for r in readers]
    state = json.loads(json.dumps({**states[0], "ranks": {**states[0]["ranks"], **states[1]["ranks"]}}))

    for rank in range(2):
        again = line_shards(tmp_path / "data", rank=rank, world_size=2)
        again.load_state_dict(state)
        mine = [line for name in sorted(shards)[rank::2] for line in shards[name]]
        assert before[rank] + list(again) == mine
        assert again.position.step == len(mine)


def test_the_position_survives_a_real_checkpoint_and_repeat_crosses_epochs(tmp_path):
    shards = make_shards(tmp_path / "data", [2, 3])
    lines = line_shards(tmp_path / "data", repeat=True)
    stream = iter(lines)
    first = take(stream, 7)  # one epoch of 5 lines, and 2 of the next
    assert first == shards["part-00.txt"] + shards["part-01.txt"] + shards["part-00.txt"]
    assert sdk.checkpoint.save({"data": lines.state_dict()}, 7)
    state, step, _ = sdk.checkpoint.load_latest()
    resumed = line_shards(tmp_path / "data", repeat=True)
    resumed.load_state_dict(state["data"])
    assert step == 7 and resumed.position.epoch == 1
    assert take(iter(resumed), 4) == shards["part-01.txt"] + shards["part-00.txt"][:1]
    # At the very end of an epoch, a resumed reader starts the next one.
    ended = line_shards(tmp_path / "data", repeat=True)
    end_stream = iter(ended)
    take(end_stream, 5)
    at_end = line_shards(tmp_path / "data", repeat=True)
    at_end.load_state_dict(ended.state_dict())
    assert next(iter(at_end)) == shards["part-00.txt"][0]


def test_a_state_it_cannot_resume_exactly_is_refused_with_the_reason(tmp_path):
    make_shards(tmp_path / "data", [2, 2, 2])
    state = line_shards(tmp_path / "data", rank=0, world_size=2).state_dict()
    with pytest.raises(ValueError, match="those of 2 ranks; this run has 3"):
        line_shards(tmp_path / "data", rank=0, world_size=3).load_state_dict(state)
    (tmp_path / "data" / "part-03.txt").write_text("new\n")
    with pytest.raises(ValueError, match="over 3 shard files"):
        line_shards(tmp_path / "data", rank=0, world_size=2).load_state_dict(state)
    with pytest.raises(ValueError, match="no position for rank 1"):
        line_shards(tmp_path / "data", rank=1, world_size=2).load_state_dict(
            line_shards(tmp_path / "data", rank=0, world_size=2).state_dict())
    with pytest.raises(FileNotFoundError, match="no shard files"):
        line_shards(tmp_path / "data", pattern="*.json")
    with pytest.raises(FileNotFoundError, match="neither a directory"):
        line_shards(tmp_path / "missing")


def test_s3_shards_are_listed_in_order_and_fetched_once_into_the_cache(s3_server, monkeypatch, tmp_path):
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    bucket, client = s3_server.create_bucket(), s3_server.client()
    shards = {f"part-{i}.txt": [f"s3-{i}-{j}" for j in range(3)] for i in range(3)}
    for name, lines in shards.items():
        client.put_object(Bucket=bucket, Key=f"data/train/{name}", Body="\n".join(lines).encode())
    client.put_object(Bucket=bucket, Key="data/trainer.txt", Body=b"beside the prefix\n")
    cache = tmp_path / "cache"

    lines = line_shards(f"s3://{bucket}/data/train", rank=0, world_size=2, cache_dir=cache)
    assert lines.shards == sorted(shards) and list(lines) == shards["part-0.txt"] + shards["part-2.txt"]
    cached = sorted(p.relative_to(cache).as_posix() for p in cache.rglob("*") if p.is_file())
    assert cached == [f"{bucket}/data/train/part-0.txt", f"{bucket}/data/train/part-2.txt"]  # rank 1's not fetched
    stamp = (cache / bucket / "data/train/part-0.txt").stat().st_mtime_ns
    again = line_shards(f"s3://{bucket}/data/train", rank=0, world_size=2, cache_dir=cache)
    assert list(again) == shards["part-0.txt"] + shards["part-2.txt"]
    assert (cache / bucket / "data/train/part-0.txt").stat().st_mtime_ns == stamp
    # A shard replaced in the bucket (same size, a later time) is fetched again.
    time.sleep(1.1)
    client.put_object(Bucket=bucket, Key="data/train/part-0.txt", Body="\n".join(["s3-0-x"] * 3).encode())
    assert list(line_shards(f"s3://{bucket}/data/train", rank=0, world_size=2, cache_dir=cache))[:3] == ["s3-0-x"] * 3


def ids_recorded(folder: Path) -> list[str]:
    return [line for path in sorted(folder.rglob("*.txt")) for line in path.read_text().splitlines()]


def test_the_demo_worker_killed_mid_shard_resumes_at_the_next_line(tmp_path):
    """Two ranks under torchrun; one is killed once a checkpoint has committed and it has read on
    past it; a second run resumes: every line of the dataset was processed exactly once."""
    data, ids = tmp_path / "data", tmp_path / "ids"
    subprocess.run([sys.executable, str(WORKER), "--make-dataset", str(data), "--shards", "3", "--lines", "10"],
                   check=True, capture_output=True)
    env = {**os.environ, "PYTHONPATH": str(WORKERS), "DATASET_DIR": str(data), "CHECKPOINT_EVERY": "4",
           "SLEEP_SEC": "0.2", "TORCHYARD_CHECKPOINT_URL": str(tmp_path / "checkpoints")}
    argv = torchrun_argv(WORKER, "--record-ids", str(ids), "--log-every", "1")
    with open(tmp_path / "first.log", "wb") as log:
        first = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        # Killed two lines past its first checkpoint: inside its only shard.
        while "rank 1 step 6 " not in (tmp_path / "first.log").read_text():
            assert first.poll() is None and time.monotonic() < deadline, (tmp_path / "first.log").read_text()
            time.sleep(0.05)
        ranks = [p for p in _children(first.pid) if "seed001_worker.py" in " ".join(p.cmdline())]
        victim = next(p for p in ranks if p.environ().get("RANK") == "1")
        victim.send_signal(signal.SIGKILL)
        assert first.wait(timeout=60) != 0
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    done_before = ids_recorded(ids)
    assert done_before and len(done_before) < 30

    second = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    # Rank 1 reads shard 1 (10 lines): it resumes inside it, at the line after the checkpoint.
    resumed = re.search(r"rank 1: resumed from checkpoint at step (\d+) \(shard 1, line (\d+)\)", second.stdout)
    assert resumed and 0 < int(resumed[1]) == int(resumed[2]) < 10, second.stdout[-2000:]
    processed = ids_recorded(ids)
    assert sorted(processed) == sorted(f"shard-{s:03d}.txt:{i}" for s in range(3) for i in range(10))
    assert len(set(processed)) == len(processed) == 30


def _children(pid: int):
    import psutil

    return psutil.Process(pid).children(recursive=True)


def test_char_gpt_trains_on_line_shards_and_its_checkpoint_keeps_the_line_position(tmp_path):
    make_shards(tmp_path / "data", [7, 7, 7])
    recipe = WORKERS / "torchyard" / "examples" / "char_gpt.py"
    config = tmp_path / "config.json"  # a small model: the test is about the data, not the training
    config.write_text(json.dumps({"hyperparameters": {"batch_size": 8, "n_layer": 1, "n_embd": 32, "block_size": 32}}))
    env = {**os.environ, "PYTHONPATH": str(WORKERS), "TORCHYARD_CHECKPOINT_URL": str(tmp_path / "checkpoints"),
           "TORCHYARD_CONFIG": str(config)}
    for steps in (4, 6):
        done = subprocess.run([sys.executable, str(recipe), "--lines", str(tmp_path / "data"), "--steps", str(steps),
                               "--checkpoint-every", "2", "--sample-chars", "0"],
                              env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "resumed from checkpoint at step 4" in done.stdout
    state, step, _ = sdk.checkpoint.load_latest()
    position = state["data"]["ranks"]["0"]
    # 8 lines a step (the batch), over 21 lines an epoch, the first run's 4 steps included.
    assert step == 6 and position["step"] == 6 * 8 and position["epoch"] == 6 * 8 // 21


def test_in_lockstep_the_demo_worker_still_processes_every_line_once(tmp_path):
    """--lockstep (an all-reduce a step, the old way) over shares of unequal length: all ranks
    stop together and every line is processed once."""
    data, ids = tmp_path / "data", tmp_path / "ids"
    subprocess.run([sys.executable, str(WORKER), "--make-dataset", str(data), "--shards", "3", "--lines", "6"],
                   check=True, capture_output=True)
    env = {**os.environ, "PYTHONPATH": str(WORKERS), "DATASET_DIR": str(data), "CHECKPOINT_EVERY": "4",
           "SLEEP_SEC": "0", "TORCHYARD_CHECKPOINT_URL": str(tmp_path / "checkpoints")}
    done = subprocess.run(torchrun_argv(WORKER, "--record-ids", str(ids), "--lockstep"), env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "lockstep" in done.stdout and "rank 1: done after 12 steps, 6 lines" in done.stdout, done.stdout
    assert sorted(ids_recorded(ids)) == sorted(f"shard-{s:03d}.txt:{i}" for s in range(3) for i in range(6))


def test_a_rank_given_no_master_runs_alone_on_its_share_with_its_own_checkpoints(tmp_path):
    """`JOB_ID=test RANK=1 WORLD_SIZE=4 python worker.py`, as the coordinator's guide runs one
    worker: no group to wait for; rank 1's shards of 4 (1 and 5 of 8); checkpoints under
    CHECKPOINT_DIR/JOB_ID/rank-1; run again, it resumes there and has nothing left to do."""
    data, ids = tmp_path / "data", tmp_path / "ids"
    subprocess.run([sys.executable, str(WORKER), "--make-dataset", str(data), "--shards", "8", "--lines", "3"],
                   check=True, capture_output=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MASTER_", "TORCHYARD_", "LOCAL_"))}
    env.update({"PYTHONPATH": str(WORKERS), "JOB_ID": "test", "RANK": "1", "WORLD_SIZE": "4", "DATASET_DIR": str(data),
                "CHECKPOINT_DIR": str(tmp_path / "ckpt"), "CHECKPOINT_EVERY": "2", "SLEEP_SEC": "0"})
    first = subprocess.run([sys.executable, str(WORKER), "--record-ids", str(ids)], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=60)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    assert "rank 1 of 4 (alone: no MASTER_ADDR)" in first.stdout and "done after 6 steps, 6 lines" in first.stdout
    assert sorted(ids_recorded(ids)) == sorted(f"shard-{s:03d}.txt:{i}" for s in (1, 5) for i in range(3))
    assert sorted(p.name for p in (tmp_path / "ckpt" / "test" / "rank-1").glob("step-*")), "no checkpoint there"
    again = subprocess.run([sys.executable, str(WORKER)], env=env, cwd=tmp_path, capture_output=True, text=True,
                           timeout=60)
    assert again.returncode == 0 and "resumed from checkpoint at step 6" in again.stdout, again.stdout + again.stderr


def test_the_demo_worker_reads_s3_shards_with_the_seeds_settings(s3_server, tmp_path):
    bucket, client = s3_server.create_bucket(), s3_server.client()
    subprocess.run([sys.executable, str(WORKER), "--make-dataset", str(tmp_path / "data"), "--shards", "3",
                    "--lines", "4"], check=True, capture_output=True)
    for path in sorted((tmp_path / "data").iterdir()):
        client.put_object(Bucket=bucket, Key=f"data/shards/{path.name}", Body=path.read_bytes())
    # Only the seed's names: the worker hands them to the SDK's S3 client itself.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "S3_"))}
    env.pop("TORCHYARD_CHECKPOINT_URL", None)
    env.update({"PYTHONPATH": str(WORKERS), "TORCHYARD_SHARD_CACHE": str(tmp_path / "cache"), "USE_S3": "true",
                "S3_ENDPOINT": s3_server.endpoint, "S3_BUCKET": bucket, "S3_ACCESS_KEY": S3_KEY,
                "S3_SECRET_KEY": S3_SECRET, "DATASET_DIR": "./data/shards", "SLEEP_SEC": "0", "CHECKPOINT_EVERY": "5",
                "CHECKPOINT_DIR": "./checkpoints", "JOB_ID": "my-job"})
    done = subprocess.run([sys.executable, str(WORKER), "--record-ids", str(tmp_path / "ids")], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"3 shards in s3://{bucket}/data/shards" in done.stdout
    assert sorted(ids_recorded(tmp_path / "ids")) == sorted(f"shard-{s:03d}.txt:{i}" for s in range(3) for i in range(4))
    assert len(list((tmp_path / "cache").rglob("shard-*.txt"))) == 3
    # Its checkpoints too: CHECKPOINT_DIR a prefix of the bucket, a folder per JOB_ID.
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix="checkpoints/my-job/")["Contents"]]
    assert any(k.endswith("manifest.json") for k in keys), keys
