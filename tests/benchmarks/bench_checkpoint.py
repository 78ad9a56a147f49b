"""Checkpoint and report() benchmark: ``python tests/benchmarks/bench_checkpoint.py [--size-mb N]``.

Measures, in one run on this machine:

- local store: sdk.checkpoint.save / load_latest of a ~1 GB state against a plain write+fsync (and a
  plain read) of the same bytes; target: save throughput >= 0.8 of the plain write; also against
  an unverified torch.save+fsync / torch.load (what a script does alone); the same for a
  sharded save (torch.distributed.checkpoint, one process) restored in place;
- S3 store (a SeaweedFS server started here and killed after): save / restore against a plain
  upload / download of the same bytes;
- sdk.report(): per-call cost with the event socket present (a reader process drains it), with the
  socket path missing, and without the variable (printing, to /dev/null); target < 20 µs.

Prints a table and writes bench-results/checkpoint.json (relative to the current directory).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "workers"))
sys.path.insert(0, str(ROOT / "tests"))

import torch  # noqa: E402
from s3_server import SeaweedS3  # noqa: E402
from torchyard.sdk import checkpoint, events  # noqa: E402
from torchyard.sdk.events import report  # noqa: E402

MB = 1 << 20


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size-mb", type=int, default=1024, help="state size (default 1024)")
    parser.add_argument("--repeats", type=int, default=5, help="local runs of each measurement (median)")
    parser.add_argument("--s3-repeats", type=int, default=1)
    parser.add_argument("--skip-s3", action="store_true")
    parser.add_argument("--report-calls", type=int, default=100_000)
    parser.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    parser.add_argument("--out", default="bench-results/checkpoint.json")
    return parser.parse_args()


def make_state(size_mb: int) -> dict[str, torch.Tensor]:
    """Sixteen float32 tensors, like a model's parameters plus optimizer moments."""
    per = size_mb * MB // 16 // 4
    gen = torch.Generator().manual_seed(0)
    return {f"layer{i}.weight": torch.rand(per, generator=gen) for i in range(16)}


def tensor_bytes(state: dict[str, torch.Tensor]):
    for tensor in state.values():
        yield memoryview(tensor.numpy()).cast("B")


def timed(fn, *args):
    """(seconds, result) of one call."""
    started = time.perf_counter()
    result = fn(*args)
    return time.perf_counter() - started, result


def raw_write(state, path: Path) -> None:
    # A fresh file each time, as a checkpoint is: overwriting the blocks of the last one in place
    # would spare the filesystem the allocation that every real save pays.
    cleared(path)
    with open(path, "wb") as fh:
        for chunk in tensor_bytes(state):
            fh.write(chunk)
        fh.flush()
        os.fsync(fh.fileno())


def torch_save_fsync(state, path: Path) -> None:
    """What a script does without Torchyard: torch.save to a fresh file, then fsync."""
    cleared(path)
    with open(path, "wb") as fh:
        torch.save(state, fh)
        fh.flush()
        os.fsync(fh.fileno())


def torch_load(path: Path) -> None:
    torch.load(path, weights_only=True)


def cleared(path: Path) -> Path:
    """``path`` with nothing left at it (a baseline's file or directory from the last repeat)."""
    shutil.rmtree(path, ignore_errors=True)
    if path.exists():
        path.unlink()
    return path


def dcp_save(state, path: Path) -> None:
    """torch.distributed.checkpoint on its own, fsynced, one file per rank: the sharded baseline."""
    import torch.distributed.checkpoint as dcp

    dcp.save(state, storage_writer=dcp.FileSystemWriter(str(cleared(path)), single_file_per_rank=True, sync_files=True))


def dcp_load(into, path: Path) -> None:
    import torch.distributed.checkpoint as dcp

    dcp.load(into, storage_reader=dcp.FileSystemReader(str(path)))


def plain_baselines(state) -> list[Baseline]:
    return [Baseline("plain", functools.partial(raw_write, state), raw_read)]


def hash_in_memory(state) -> str:
    sha = hashlib.sha256()
    for chunk in tensor_bytes(state):
        sha.update(chunk)
    return sha.hexdigest()


def raw_read(path: Path) -> None:
    with open(path, "rb", buffering=0) as fh:
        while fh.read(16 * MB):
            pass


def summarize(size_mb: float, raw: list[float], ours: list[float]) -> dict:
    raw_s, ours_s = statistics.median(raw), statistics.median(ours)
    return {
        "raw_seconds": round(raw_s, 3),
        "sdk_seconds": round(ours_s, 3),
        "raw_mb_s": round(size_mb / raw_s, 1),
        "sdk_mb_s": round(size_mb / ours_s, 1),
        "ratio": round(raw_s / ours_s, 3),
    }


@dataclass
class Baseline:
    """What the SDK is compared with: ``put(path)`` writes the state, ``get(path)`` reads it back.
    plain: the bytes alone (write+fsync, read); torch: torch.save+fsync, torch.load; dcp:
    torch.distributed.checkpoint's own save and load. None of them hashes or commits anything."""

    name: str
    put: Callable[[Path], None]
    get: Callable[[Path], None]


def bench_store(
    state, size_mb: float, scratch: Path, url: str, baselines: list[Baseline], repeats: int, into=None
) -> dict:
    """SDK save and restore against each baseline (the first is the plain bytes). With ``into`` (a
    preallocated state) the save is sharded, through torch.distributed.checkpoint, and the restore
    loads in place into it."""
    os.environ["TORCHYARD_CHECKPOINT_URL"] = url
    sharded = into is not None
    path = scratch / "baseline"
    saves, loads = [], []
    base_saves: dict[str, list[float]] = {b.name: [] for b in baselines}
    base_loads: dict[str, list[float]] = {b.name: [] for b in baselines}
    step = 0
    for i in range(repeats):
        # Alternate the order so neither side always runs on a warmer page cache.
        order = ("baselines", "sdk") if i % 2 == 0 else ("sdk", "baselines")
        for which in order:
            if which == "baselines":
                for b in baselines:
                    base_saves[b.name].append(timed(b.put, path)[0])
                    base_loads[b.name].append(timed(b.get, path)[0])
            else:
                step += 1
                seconds, ok = timed(functools.partial(checkpoint.save, sharded=sharded), state, step)
                assert ok, "save failed"
                saves.append(seconds)
                seconds, loaded = timed(functools.partial(checkpoint.load_latest, into=into))
                assert loaded is not None and loaded[1] == step
                loads.append(seconds)
                del loaded
    return {
        b.name: {"save": summarize(size_mb, base_saves[b.name], saves),
                 "restore": summarize(size_mb, base_loads[b.name], loads)}
        for b in baselines
    }  # fmt: skip


# --- S3 -------------------------------------------------------------------------------------------
def seaweedfs(workdir: Path) -> SeaweedS3:
    """The tests' SeaweedFS server, with the SDK's environment pointed at it."""
    server = SeaweedS3(workdir).start(timeout=60)
    os.environ.update(server.env())
    return server


# --- report() -------------------------------------------------------------------------------------
def per_call_us(calls: int) -> dict:
    """Mean cost per report() call over ``calls`` back-to-back calls, and the median over batches of
    100 (less sensitive to the scheduler preempting this process on a busy machine)."""
    events.reset()
    for step in range(1000):  # warm-up
        report(step=step, loss=0.25, throughput=1234.5)
    batches = []
    started = time.perf_counter()
    for first in range(0, calls, 100):
        batch_started = time.perf_counter()
        for step in range(first, first + 100):
            report(step=step, loss=0.25, throughput=1234.5)
        batches.append(time.perf_counter() - batch_started)
    mean = (time.perf_counter() - started) / calls * 1e6
    return {"mean_us": round(mean, 2), "median_us": round(statistics.median(batches) / 100 * 1e6, 2)}


def bench_report(calls: int, scratch: Path) -> dict:
    path = scratch / "events.sock"
    reader_code = (
        "import socket,sys\ns=socket.socket(socket.AF_UNIX,socket.SOCK_DGRAM);s.bind(sys.argv[1])\n"
        "print('ready',flush=True)\nn=0\nwhile True:\n s.recv(65536)\n"
    )
    reader = subprocess.Popen([sys.executable, "-c", reader_code, str(path)], stdout=subprocess.PIPE)
    try:
        reader.stdout.readline()
        os.environ["TORCHYARD_EVENT_SOCKET"] = str(path)
        present = per_call_us(calls)
        present_dropped = events.channel().dropped
    finally:
        reader.kill()
        reader.wait()
    os.environ["TORCHYARD_EVENT_SOCKET"] = str(scratch / "nobody-here.sock")
    missing = per_call_us(calls)
    events.channel()._pending.clear()  # nothing to deliver at exit in a benchmark
    del os.environ["TORCHYARD_EVENT_SOCKET"]
    with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):
        printing = per_call_us(calls)
    events.reset()
    return {
        "calls": calls,
        "socket_present": present,
        "socket_present_dropped": present_dropped,
        "socket_missing": missing,
        "no_socket_print": printing,
    }


def main() -> int:
    args = parse_args()
    scratch = Path(args.dir or tempfile.mkdtemp(prefix="torchyard-bench-"))
    scratch.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    results: dict = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__},
        "size_mb": args.size_mb,
    }
    try:
        print(f"building a {args.size_mb} MB state ...", flush=True)
        state = make_state(args.size_mb)
        size_mb = sum(t.numel() * t.element_size() for t in state.values()) / MB

        # The floor under any save that hashes every byte on one core: sha256 alone, in memory.
        seconds = min(timed(hash_in_memory, state)[0] for _ in range(2))
        results["sha256_only_mb_s"] = round(size_mb / seconds, 1)
        print(f"sha256 alone       : {results['sha256_only_mb_s']:8.1f} MB/s (one core, from memory)", flush=True)

        local = scratch / "local"
        local.mkdir()
        results["local"] = bench_store(
            state, size_mb, scratch, str(local / "checkpoints"),
            plain_baselines(state) + [Baseline("torch", functools.partial(torch_save_fsync, state), torch_load)],
            repeats=args.repeats,
        )  # fmt: skip
        print_store("local", results["local"])
        into = {name: torch.empty_like(tensor) for name, tensor in state.items()}
        results["local_sharded"] = bench_store(
            state, size_mb, scratch, str(local / "sharded"),
            plain_baselines(state) + [Baseline("dcp", functools.partial(dcp_save, state), functools.partial(dcp_load, into))],
            repeats=args.repeats, into=into,
        )  # fmt: skip
        del into
        print_store("local sharded (DCP)", results["local_sharded"])

        if not args.skip_s3:
            server = seaweedfs(scratch / "seaweedfs")
            try:
                client = server.client()
                bucket = server.create_bucket()
                transfer = checkpoint.stores.S3Store(bucket, "")._transfer_config()
                raw_file = scratch / "raw.bin"
                raw_write(state, raw_file)

                # The same bytes every time, from the local file written above.
                def put(_: Path) -> None:
                    client.upload_file(str(raw_file), bucket, "raw/raw.bin", Config=transfer)

                def get(_: Path) -> None:
                    client.download_file(
                        bucket, "raw/raw.bin", str(scratch / "raw-down.bin"), Config=transfer
                    )

                results["s3"] = bench_store(
                    state, size_mb, scratch, f"s3://{bucket}/bench", [Baseline("plain", put, get)],
                    repeats=args.s3_repeats,
                )
            finally:
                server.stop()
            print_store("s3", results["s3"])

        del state
        results["report"] = bench_report(args.report_calls, scratch)
        r = results["report"]
        for case in ("socket_present", "socket_missing", "no_socket_print"):
            print(
                f"report() {case:16}: {r[case]['mean_us']:6.2f} µs/call mean, "
                f"{r[case]['median_us']:6.2f} µs median of 100-call batches"
            )
        print(f"  ({r['socket_present_dropped']} of {r['calls']} events dropped by a reader at full speed)")
    finally:
        if args.dir is None:
            shutil.rmtree(scratch, ignore_errors=True)

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


def print_store(name: str, result: dict) -> None:
    """One line per (baseline, save/restore); a ratio above 1 means the SDK was faster."""
    for baseline, kinds in result.items():
        for kind in ("save", "restore"):
            r = kinds[kind]
            print(
                f"{name:19} {kind:7}: sdk {r['sdk_mb_s']:8.1f} MB/s ({r['sdk_seconds']:.2f}s)  "
                f"{baseline:5} {r['raw_mb_s']:8.1f} MB/s ({r['raw_seconds']:.2f}s)  ratio {r['ratio']:.2f}",
                flush=True,
            )


if __name__ == "__main__":
    sys.exit(main())
