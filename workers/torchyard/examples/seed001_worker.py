"""The Rust coordinator's demo worker: each rank reads its round-robin share of line shards, one line per step, and checkpoints its exact position, so a recovered job goes on at the next line.

What `POST /jobs {"world_size": N}` runs. Ranks step apart, as the coordinator's workers do: each
goes through its own lines at its own pace and meets the others only to commit a checkpoint (every
rank runs as many steps as the longest share, so all commit the same steps); `--lockstep` makes
them step together (one all-reduce a step). Settings are the coordinator's environment variables
(a flag given on the command line wins):

    DATASET_DIR        the shard files: a directory on every machine, or s3://bucket/prefix
                       (unset or empty: synthetic shards, as the seed's make_dataset.py writes them,
                       made in the node's working directory)
    CHECKPOINT_EVERY   steps between checkpoints (default: the job's checkpointing.every_n_steps, else 5)
    SLEEP_SEC          pause per step, seconds (default 0.5)
    USE_S3=true        read DATASET_DIR from the bucket S3_BUCKET (a prefix in it), through
                       S3_ENDPOINT with S3_ACCESS_KEY / S3_SECRET_KEY (else the AWS_* variables)
    CHECKPOINT_DIR     where checkpoints go when it runs outside Torchyard (default ./checkpoints;
                       with USE_S3, that prefix of S3_BUCKET), in a folder named by JOB_ID; in a
                       Torchyard job, the job's checkpoint store (the server's CHECKPOINT_DIR)
    JOB_ID, RANK, WORLD_SIZE
                       outside Torchyard: with no MASTER_ADDR to meet the others at, this process
                       runs alone as RANK of WORLD_SIZE (its share of the shards, its own
                       checkpoints), as `JOB_ID=test RANK=0 WORLD_SIZE=4 python worker.py` does

Also: ``python seed001_worker.py --make-dataset DIR [--shards 8] [--lines 50]`` writes synthetic
shards (the seed's ``python demo/make_dataset.py``). ``--record-ids DIR`` writes the id of every
line each rank processed (``<file>:<line index>``), one file per rank and checkpoint, written
before the checkpoint commits and named by its step, so a step range done again after a recovery
rewrites the same file: together the files hold every processed line exactly once.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

try:
    from torchyard import protocol, sdk
except ImportError:  # a source checkout run as a plain file: workers/ holds the package
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from torchyard import protocol, sdk

SYNTHETIC_DIR = "seed001-data"
DEFAULT_SHARDS, DEFAULT_LINES = 8, 50


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset-dir", default=None, help="shard files (default: DATASET_DIR)")
    parser.add_argument("--checkpoint-every", type=int, default=None, help="default: CHECKPOINT_EVERY")
    parser.add_argument("--sleep-sec", type=float, default=None, help="default: SLEEP_SEC, else 0.5")
    parser.add_argument("--log-every", type=int, default=10, help="steps between log lines")
    parser.add_argument("--lockstep", action="store_true", help="ranks step together (an all-reduce a step)")
    parser.add_argument("--record-ids", default=None, help="write the processed line ids under this directory")
    parser.add_argument("--make-dataset", metavar="DIR", default=None, help="write synthetic shards to DIR and exit")
    parser.add_argument("--shards", type=int, default=DEFAULT_SHARDS, help="with --make-dataset")
    parser.add_argument("--lines", type=int, default=DEFAULT_LINES, help="with --make-dataset: lines per shard")
    return parser.parse_args(argv)


def _env_number(name: str, kind: type, default):
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return kind(raw)
    except ValueError:
        raise SystemExit(f"{name}={raw!r} is not a {kind.__name__}") from None


# --- data -----------------------------------------------------------------------------------------
def make_dataset(directory: Path, shards: int = DEFAULT_SHARDS, lines: int = DEFAULT_LINES) -> Path:
    """Synthetic shards: ``shard-NNN.txt`` with ``lines`` numbered lines each, the same everywhere.
    Written next to ``directory`` and renamed into place, so ranks that make it at once on one
    machine never read a half-written one."""
    if directory.is_dir():
        return directory
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=directory.parent, prefix=f".{directory.name}."))
    for s in range(shards):
        text = "".join(f"shard {s:03d} line {i:06d} the quick brown fox jumps over lazy dog {s * lines + i}\n"
                       for i in range(lines))
        (staging / f"shard-{s:03d}.txt").write_text(text)
    try:
        staging.rename(directory)
    except OSError:  # another rank was first: its copy is the same
        shutil.rmtree(staging, ignore_errors=True)
    return directory


def dataset_source(args: argparse.Namespace) -> str:
    """Where the shards are: --dataset-dir, DATASET_DIR (with the seed's USE_S3 settings), or
    synthetic shards in the working directory."""
    source = args.dataset_dir or os.environ.get("DATASET_DIR", "").strip()
    if use_s3() and not source.startswith("s3://"):
        source = in_bucket(source, "DATASET_DIR")
    return source or str(make_dataset(Path.cwd() / SYNTHETIC_DIR))


def use_s3() -> bool:
    return os.environ.get("USE_S3", "").strip().lower() in ("1", "true", "yes")


def in_bucket(path: str, what: str) -> str:
    """``path`` as a prefix of S3_BUCKET (the SDK's S3 client reads the coordinator's S3_* names)."""
    bucket = os.environ.get("S3_BUCKET", "").strip()
    if not bucket:
        raise SystemExit(f"USE_S3=true needs S3_BUCKET (or {what}=s3://bucket/prefix)")
    return f"s3://{bucket}/{path.strip('/').removeprefix('./')}".rstrip("/")


def standalone() -> bool:
    """A rank of several with no master to meet them at: it runs alone (see the module docstring)."""
    return sdk.world_size() > 1 and not os.environ.get("MASTER_ADDR", "").strip()


def own_checkpoints(rank: int | None) -> None:
    """Outside a Torchyard job, checkpoints go where the coordinator put them: CHECKPOINT_DIR (or
    that prefix of S3_BUCKET with USE_S3), a folder per JOB_ID, and one per rank run alone."""
    if os.environ.get(protocol.ENV_CHECKPOINT_URL, "").strip():
        return  # Torchyard's job store
    root = os.environ.get("CHECKPOINT_DIR", "").strip() or "./checkpoints"
    if use_s3() and not root.startswith("s3://"):
        root = in_bucket(root, "CHECKPOINT_DIR")
    url = f"{root.rstrip('/')}/{os.environ.get('JOB_ID', '').strip() or 'job'}"
    if rank is not None:
        url += f"/rank-{rank}"
    os.environ[protocol.ENV_CHECKPOINT_URL] = url


def count_lines(lines: sdk.data.LineShards) -> int:
    total = 0
    for shard_idx in lines.mine:
        with open(lines.local_path(shard_idx), "rb") as handle:
            total += sum(1 for _ in handle)
    return total


def record(directory: str | None, rank: int, step: int, ids: list[str]) -> None:
    """This rank's ids of the steps up to ``step``, in a file named by that step (written whole)."""
    if directory is None:
        return
    folder = Path(directory) / f"rank-{rank}"
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f".{step:09d}.tmp"
    partial.write_text("".join(f"{i}\n" for i in ids))
    os.replace(partial, folder / f"{step:09d}.txt")


# --- the run --------------------------------------------------------------------------------------
def all_ranks(value: int, op: str) -> int:
    """``value`` reduced over the ranks (sum or max); the value itself in a single process."""
    if not sdk.is_initialized():
        return value
    import torch
    import torch.distributed as dist

    tensor = torch.tensor([value], dtype=torch.long)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX)
    return int(tensor.item())


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.make_dataset:
        print(make_dataset(Path(args.make_dataset), args.shards, args.lines))
        return 0
    every = args.checkpoint_every
    if every is None:
        every = _env_number("CHECKPOINT_EVERY", int, None)
    every = sdk.checkpoint.every_n_steps(every) if every is not None else (sdk.checkpoint.every_n_steps() or 5)
    sleep = args.sleep_sec if args.sleep_sec is not None else _env_number("SLEEP_SEC", float, 0.5)

    rank, world = sdk.rank(), sdk.world_size()
    alone = standalone()
    own_checkpoints(rank if alone else None)
    if alone:
        # The SDK then sees one process: its checkpoints and collectives are this rank's alone.
        os.environ["RANK"], os.environ["WORLD_SIZE"] = "0", "1"
    sdk.init_process_group()
    lines = sdk.data.line_shards(dataset_source(args), rank=rank, world_size=world)
    print(f"rank {rank} of {world}{' (alone: no MASTER_ADDR)' if alone else ''}: {len(lines.shards)} shards in "
          f"{lines.source}; mine: {[lines.shards[i] for i in lines.mine]} (checkpoint every {every}, sleep {sleep}s, "
          f"{'lockstep' if args.lockstep else 'apart'})", flush=True)
    # Every rank runs as many steps as the longest share: a rank out of lines keeps counting
    # (without sleeping) so that all of them reach each checkpoint's step.
    total = max(1, all_ranks(count_lines(lines), "max"))
    sdk.set_total_steps(total)

    step = 0
    resumed = sdk.checkpoint.load_latest()
    if resumed is not None:
        state, step, _ = resumed
        lines.load_state_dict(state["data"])
        p = lines.position
        print(f"rank {rank}: resumed from checkpoint at step {step} (shard {p.shard_idx}, line {p.line_idx})", flush=True)

    stream, ids = iter(lines), list[str]()
    window_start, window_lines = time.perf_counter(), 0
    while True:
        line = next(stream, None)
        if args.lockstep:  # one with no line left waits for the others, and all stop at once
            if all_ranks(int(line is not None), "sum") == 0:
                break
        elif step >= total:
            break
        step += 1
        if line is not None and lines.last_id is not None:
            ids.append(lines.last_id)
            window_lines += 1
            if sleep > 0:
                time.sleep(sleep)
        if step % args.log_every == 0:
            elapsed = time.perf_counter() - window_start
            rate = window_lines / elapsed if elapsed > 0 else 0.0
            sdk.report(step=step, throughput=rate, lines_per_s=rate, lines=lines.position.step)
            print(f"rank {rank} step {step} {lines.last_id} ({rate:.1f} lines/s)", flush=True)
            window_start, window_lines = time.perf_counter(), 0
        if every and step % every == 0:
            checkpoint(args, rank, step, lines, ids)
            ids = []
    if not every:
        record(args.record_ids, rank, step, ids)
    elif step % every:
        checkpoint(args, rank, step, lines, ids)
    sdk.report(step=step, lines=lines.position.step)
    print(f"rank {rank}: done after {step} steps, {lines.position.step} lines of its shards", flush=True)
    sdk.shutdown_process_group()
    return 0


def checkpoint(args: argparse.Namespace, rank: int, step: int, lines: sdk.data.LineShards, ids: list[str]) -> None:
    record(args.record_ids, rank, step, ids)  # before the commit: see the module docstring
    data = lines.state_dict()  # every rank: it gathers the positions
    sdk.checkpoint.save({"data": data}, step, metadata={"recipe": "seed001_worker"})


if __name__ == "__main__":
    sys.exit(main())
