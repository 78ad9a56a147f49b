"""Checkpoint and report() benchmark: ``python tests/benchmarks/bench_checkpoint.py [--size-mb N]``.

Measures, in one run on this machine:

- local store: sdk.checkpoint.save / load_latest of a ~1 GB state against a plain write+fsync (and a
  plain read) of the same bytes; target: save throughput >= 0.8 of the plain write; also against
  an unverified torch.save+fsync / torch.load (what a script does alone); the same for a
  sharded save (torch.distributed.checkpoint, one process) restored in place;
- S3 store (a SeaweedFS server started here and killed after): save / restore against a plain
  upload / download of the same bytes;
- a training loop over the same state (one layer updated in place and a matmul per step) saving
  every N steps, synchronously and then with ``async_=True``: the loop's stall per save (how long
  save() held it; target: async at most 0.1 of sync), and the mean step time of each run (an async
  save's background work shares the CPUs with the steps beside it). N is
  chosen so that a background save has time to finish before the next (--every to set it). With a
  GPU (--device cuda, the default when there is one) the state lives on it.
- sdk.report(): per-call cost with the event socket present (a reader process drains it), with the
  socket path missing, and without the variable (printing, to /dev/null); target < 20 µs.

Ends with a summary of the throughput ratios (SDK against torch.save+fsync / torch.load and raw
DCP; target >= 0.8) and the stall ratio. Prints a table and writes bench-results/checkpoint.json
(relative to the current directory).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import json
import math
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
    parser.add_argument("--skip-loop", action="store_true", help="skip the training loop (stall per save)")
    parser.add_argument("--loop-saves", type=int, default=4, help="saves per mode in the training loop")
    parser.add_argument("--every", type=int, default=0, help="steps between saves (default: chosen)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
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


def torch_load_mmap(path: Path) -> None:
    """torch.load(mmap=True): maps the file and copies nothing (the SDK's restore does the same,
    after hashing every byte); shown for reference, not a target."""
    torch.load(path, weights_only=True, mmap=True)


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
    """Medians, and the ratio as the median of each repeat's own ratio: a repeat runs the two side
    by side, so a slow spell of a shared machine's disk weighs on both of its numbers alike."""
    raw_s, ours_s = statistics.median(raw), statistics.median(ours)
    return {
        "raw_seconds": round(raw_s, 3),
        "sdk_seconds": round(ours_s, 3),
        "raw_mb_s": round(size_mb / raw_s, 1),
        "sdk_mb_s": round(size_mb / ours_s, 1),
        "ratio": round(statistics.median(r / o for r, o in zip(raw, ours, strict=True)), 3),
        "ratios": [round(r / o, 3) for r, o in zip(raw, ours, strict=True)],
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


# --- a training loop that saves every N steps ----------------------------------------------------
def train_step(state: dict[str, torch.Tensor], step: int, work: torch.Tensor) -> None:
    """One step: an optimizer-like in-place update of one layer, and some compute."""
    state[f"layer{step % len(state)}.weight"].add_(1e-3)
    torch.mm(work, work)
    if work.is_cuda:
        torch.cuda.synchronize()  # a real step ends with the loss read back


def base_step_seconds(state, work, steps: int = 50) -> float:
    times = []
    for step in range(steps):
        started = time.perf_counter()
        train_step(state, step, work)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def run_loop(state, work, url: str, every: int, saves: int, async_: bool) -> dict:
    """``saves`` saves, one every ``every`` steps, and ``every`` more steps after the last one (so
    the last async save also runs beside training). Stall: how long each save() call held the
    loop; the steps are timed apart from it (an async save slows the steps it runs beside)."""
    os.environ["TORCHYARD_CHECKPOINT_URL"] = url
    stalls, steps, pending = [], [], []
    waited = 0  # saves that found the previous one still in flight (their stall counts the wait)
    for step in range(1, every * (saves + 1) + 1):
        started = time.perf_counter()
        train_step(state, step, work)
        steps.append(time.perf_counter() - started)
        if step % every == 0 and step <= every * saves:
            waited += checkpoint.background.in_flight() is not None
            started = time.perf_counter()
            pending.append(checkpoint.save(state, step, async_=async_, keep=2))
            stalls.append(time.perf_counter() - started)
    started = time.perf_counter()
    checkpoint.wait()
    final_wait = time.perf_counter() - started
    committed = [p.result() if async_ else p for p in pending]
    assert all(committed), f"a save failed: {committed}"
    background = [p.background_seconds for p in pending] if async_ else []
    return {
        "saves": saves,
        "every": every,
        "stall_seconds": [round(x, 4) for x in stalls],
        "stall_median": round(statistics.median(stalls), 4),
        "stall_first": round(stalls[0], 4),
        "waited_for_previous": waited,
        "background_median": round(statistics.median(background), 3) if background else None,
        "steps_seconds": round(sum(steps), 3),
        "step_mean": round(statistics.mean(steps), 5),
        "final_wait": round(final_wait, 3),
    }


def bench_loop(state, scratch: Path, every: int, saves: int, sync_save_estimate: float) -> dict:
    work = torch.rand(512, 512, device=next(iter(state.values())).device)
    base_step = base_step_seconds(state, work)
    if every <= 0:
        # Long enough for an async save to finish beside the steps (which slow it down), so the
        # stall measures the copy rather than waiting for the previous save.
        every = max(10, math.ceil(4 * sync_save_estimate / base_step))
    print(f"training loop: {base_step * 1000:.1f} ms a step, a save every {every} steps, {saves} saves per mode",
          flush=True)
    result: dict = {"base_step_seconds": round(base_step, 4)}
    for mode in ("sync", "async"):
        result[mode] = run_loop(state, work, str(scratch / f"loop-{mode}"), every, saves, mode == "async")
    for mode in ("sync", "async"):
        r = result[mode]
        print(
            f"loop {mode:5}: stall per save {r['stall_median']:.3f}s median (first {r['stall_first']:.3f}s, "
            f"all {r['stall_seconds']}), {r['step_mean'] * 1000:.1f} ms a step"
            + (f", background {r['background_median']:.2f}s a save" if r["background_median"] is not None else "")
            + (f", {r['waited_for_previous']} found the previous save in flight" if r["waited_for_previous"] else ""),
            flush=True,
        )
    result["stall_ratio"] = round(result["async"]["stall_median"] / result["sync"]["stall_median"], 3)
    return result


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
        results["machine"]["device"] = args.device
        if args.device != "cpu":
            results["machine"]["gpu"] = torch.cuda.get_device_name()
        size_mb = sum(t.numel() * t.element_size() for t in state.values()) / MB

        # The floor under any save that hashes every byte on one core: sha256 alone, in memory.
        seconds = min(timed(hash_in_memory, state)[0] for _ in range(2))
        results["sha256_only_mb_s"] = round(size_mb / seconds, 1)
        print(f"sha256 alone       : {results['sha256_only_mb_s']:8.1f} MB/s (one core, from memory)", flush=True)

        local = scratch / "local"
        local.mkdir()
        results["local"] = bench_store(
            state, size_mb, scratch, str(local / "checkpoints"),
            plain_baselines(state) + [
                Baseline("torch", functools.partial(torch_save_fsync, state), torch_load),
                Baseline("mmap", functools.partial(torch_save_fsync, state), torch_load_mmap),
            ],
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

        if not args.skip_loop:
            estimate = results["local"]["torch"]["save"]["sdk_seconds"]
            on_device = {name: tensor.to(args.device) for name, tensor in state.items()}
            results["loop"] = bench_loop(on_device, scratch, args.every, args.loop_saves, estimate)
            del on_device

        del state
        results["report"] = bench_report(args.report_calls, scratch)
        r = results["report"]
        for case in ("socket_present", "socket_missing", "no_socket_print"):
            print(
                f"report() {case:16}: {r[case]['mean_us']:6.2f} µs/call mean, "
                f"{r[case]['median_us']:6.2f} µs median of 100-call batches"
            )
        print(f"  ({r['socket_present_dropped']} of {r['calls']} events dropped by a reader at full speed)")
        print_summary(results)
    finally:
        if args.dir is None:
            shutil.rmtree(scratch, ignore_errors=True)

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


def print_summary(results: dict) -> None:
    """The targets in one table: throughput ratios (above 1: the SDK was faster) and the stall."""
    rows = [
        ("save    vs torch.save+fsync", results["local"]["torch"]["save"]["ratio"], ">= 0.8"),
        ("restore vs torch.load", results["local"]["torch"]["restore"]["ratio"], ">= 0.8"),
        ("sharded save    vs raw DCP", results["local_sharded"]["dcp"]["save"]["ratio"], ">= 0.8"),
        ("sharded restore vs raw DCP", results["local_sharded"]["dcp"]["restore"]["ratio"], ">= 0.8"),
    ]
    if "loop" in results:
        rows.append(("loop stall per save, async/sync", results["loop"]["stall_ratio"], "<= 0.1"))
    print(f"\n{'summary (' + str(results['size_mb']) + ' MB, ' + results['machine']['device'] + ')':40} {'ratio':>7}  target")
    for name, ratio, target in rows:
        print(f"{name:40} {ratio:7.3f}  {target}")
    if "report" in results:  # a training loop calls report() every step: it must cost next to nothing
        median = results["report"]["socket_present"]["median_us"]
        print(f"{'report() to a live socket, median µs':40} {median:7.2f}  < 20")


def print_store(name: str, result: dict) -> None:
    """One line per (baseline, save/restore); a ratio above 1 means the SDK was faster."""
    for baseline, kinds in result.items():
        for kind in ("save", "restore"):
            r = kinds[kind]
            print(
                f"{name:19} {kind:7}: sdk {r['sdk_mb_s']:8.1f} MB/s ({r['sdk_seconds']:.2f}s)  "
                f"{baseline:5} {r['raw_mb_s']:8.1f} MB/s ({r['raw_seconds']:.2f}s)  ratio {r['ratio']:.2f} "
                f"(each repeat: {' '.join(f'{x:.2f}' for x in r['ratios'])})",
                flush=True,
            )


if __name__ == "__main__":
    sys.exit(main())
