"""Manifest-committed checkpoints: ``sdk.checkpoint.save(state, step)`` / ``load_latest()``.

Save protocol (DESIGN.md section 8): rank 0 prepares a staging place; the ranks write the data
(``state.pt`` from rank 0 for replicated DDP state; with ``sharded=True`` every rank writes its
shards through torch.distributed.checkpoint, see sharded.py), fsync it and hash it as it is
written; all ranks exchange their results (which is also the barrier); only when every rank
succeeded does rank 0 write manifest.json last and atomically, move LATEST, send the
``checkpoint`` event and apply retention. A failed save never commits: it warns, discards the
staging files and returns False, and training goes on.

With ``async_=True`` the state is first copied into host memory (staging.py) and the same protocol
runs on a background thread, its collectives on a gloo group of their own (background.py).
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import os
import random
import sys
import time
from collections.abc import Iterator, Mapping
from typing import Any, NotRequired, TypedDict

from torchyard import protocol
from torchyard.sdk import context, distributed, events
from torchyard.sdk.checkpoint import background
from torchyard.sdk.checkpoint import cadence as cadence_module
from torchyard.sdk.checkpoint import memory as memory_tier
from torchyard.sdk.checkpoint.background import PendingSave
from torchyard.sdk.checkpoint.cadence import AUTO, Cadence
from torchyard.sdk.checkpoint.hashing import hash_file, skip_torch_crc32
from torchyard.sdk.checkpoint.staging import Stager
from torchyard.sdk.checkpoint.stores import (
    STAGING_PREFIX,
    FileEntry,
    LocalStore,
    S3Store,
    Store,
    open_store,
    split_manifest_uri,
    step_dir_name,
    step_of,
)
from torchyard.sdk.config import job_config
from torchyard.stream_contract import Manifest, SaveTiming

__all__ = [
    "LocalStore",
    "PendingSave",
    "S3Store",
    "Store",
    "checkpoint_url",
    "every_n_steps",
    "load_latest",
    "memory_due",
    "open_store",
    "restore_rng",
    "rng_state",
    "save",
    "settings",
    "wait",
]

DEFAULT_URL = "./checkpoints"
DEFAULT_KEEP = 3
FORMAT = "torchyard-checkpoint/1"
# Test hooks. Set to a path, rank 0 creates that file just before committing and waits there until
# the file is removed, so a test can kill -9 the process (or let it go on) at the one moment that
# matters. Set to "<rank>:<path>", that rank does the same once its data is written, before the
# exchange of results that precedes any commit.
ENV_PAUSE_BEFORE_COMMIT = "TORCHYARD_TEST_PAUSE_BEFORE_COMMIT"
ENV_PAUSE_AFTER_WRITE = "TORCHYARD_TEST_PAUSE_AFTER_WRITE"


def _warn(message: str) -> None:
    print(f"[torchyard] warning: {message}", file=sys.stderr, flush=True)


def checkpoint_url() -> str:
    """The store root: TORCHYARD_CHECKPOINT_URL, else ./checkpoints."""
    return os.environ.get(protocol.ENV_CHECKPOINT_URL, "").strip() or DEFAULT_URL


def settings() -> dict[str, Any]:
    """The job's ``checkpointing`` section with defaults: enabled, every_n_steps, keep."""
    section = job_config()["checkpointing"]
    return {
        "enabled": bool(section.get("enabled", False)),
        "every_n_steps": AUTO if section.get("every_n_steps") == AUTO else int(section.get("every_n_steps") or 0),
        "keep": int(section.get("keep") or DEFAULT_KEEP),
        **{k: v for k, v in section.items() if k not in ("enabled", "every_n_steps", "keep")},
    }


# The cadence() the script asked for, which its saves teach ("auto").
_cadence: Cadence | None = None


# --- collectives that degrade to nothing in a single process -------------------------------------
# ``group`` is None for the default group (synchronous saves, loads, on the caller's thread) or the
# async saves' own gloo group (on their background thread).
def _group_active() -> bool:
    if distributed.is_initialized():
        return True
    if context.is_distributed() and not distributed.in_place():  # in_place: rank 0 writes the replicas' state alone
        raise RuntimeError(
            "checkpoints in a distributed run need the process group: call sdk.init_process_group() first"
        )
    return False


def _gather(value: Any, group: Any = None) -> list[Any]:
    if not _group_active():
        return [value]
    import torch.distributed as dist

    gathered: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(gathered, value, group=group)
    return gathered


def _from_rank0(value: Any, group: Any = None) -> Any:
    if not _group_active():
        return value
    import torch.distributed as dist

    box = [value]
    dist.broadcast_object_list(box, src=0, group=group)
    return box[0]


def _all_agree(ok: bool) -> bool:
    return all(_gather(bool(ok)))


# --- save -----------------------------------------------------------------------------------------
def _job_id() -> int | str | None:
    raw = context.job_id()
    return int(raw) if raw.isdigit() else (raw or None)


def _write_own_file(store: Store, step_dir: str, name: str, state: Any) -> FileEntry:
    import torch

    def produce(fh) -> None:
        with skip_torch_crc32():
            torch.save(state, fh)

    return store.write_file(step_dir, name, produce)


class RngState(TypedDict):
    """This process's random generators' states (rng_state), as a checkpoint keeps them."""

    torch: Any  # torch.get_rng_state(): a ByteTensor
    python: tuple[Any, ...]  # random.getstate()
    cuda: NotRequired[list[Any]]  # torch.cuda.get_rng_state_all(), once CUDA is in use


def rng_state() -> RngState:
    """This process's random number generators (torch's CPU generator, CUDA's once CUDA is in use,
    Python's ``random``), to keep in a checkpoint's state under the key ``rng``: the manifest's
    ``rng_state`` then says the checkpoint holds them. ``restore_rng(state["rng"])`` puts them back."""
    import torch

    state: RngState = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: Mapping[str, Any]) -> None:
    """Put back the generators ``rng_state()`` saved (CUDA's only where CUDA is available)."""
    import torch

    torch.set_rng_state(state["torch"])
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# Keys that hold random generator states (rng_state() is saved under the first).
RNG_KEYS = ("rng", "rng_state")


def _inside(value: Any, depth: int = 4) -> Iterator[Any]:
    """`value` and what it holds, a few levels down: mappings, sequences, and the attributes of
    torch.distributed.checkpoint's Stateful objects (an object with state_dict and load_state_dict)."""
    yield value
    if depth == 0 or isinstance(value, (str, bytes)):
        return
    if isinstance(value, Mapping):
        children: Any = value.values()
    elif isinstance(value, (list, tuple)):
        children = value
    elif callable(getattr(value, "state_dict", None)) and callable(getattr(value, "load_state_dict", None)):
        children = vars(value).values() if hasattr(value, "__dict__") else ()
    else:
        return
    for child in children:
        yield from _inside(child, depth - 1)


class StateDescription(TypedDict):
    """What a manifest says of a checkpoint's state beside its files (describe_state)."""

    epoch: int | None
    strategy: str
    backend: str | None
    optimizer_state: bool
    rng_state: bool


def describe_state(state: Any, epoch: int | None = None) -> StateDescription:
    """What a manifest says of a checkpoint beside its files (DistroML's manifest lists them): the
    epoch the script gave, the job's strategy, the process group's backend (None for a single
    process), and whether the state holds an optimizer's state (a torch.optim state dict, or an
    optimizer inside a Stateful) and random generator states (an entry named rng or rng_state)."""
    optim = sys.modules.get("torch.optim")
    optimizer_state = rng = False
    for value in _inside(state):
        if isinstance(value, Mapping):
            optimizer_state = optimizer_state or ("state" in value and "param_groups" in value)
            rng = rng or any(key in value for key in RNG_KEYS)
        elif optim is not None and isinstance(value, optim.Optimizer):
            optimizer_state = True
    backend = None
    if distributed.is_initialized():
        import torch.distributed as dist

        backend = str(dist.get_backend())
    return {
        "epoch": None if epoch is None else int(epoch),
        "strategy": str(job_config()["distributed"].get("strategy") or "data_parallel"),
        "backend": backend,
        "optimizer_state": optimizer_state,
        "rng_state": rng,
    }


def _build_manifest(
    step: int, entries: list[FileEntry], sharded: bool, metadata: dict | None, timing: SaveTiming,
    described: StateDescription,
) -> Manifest:
    import torch

    files = sorted((e.to_dict() for e in entries), key=lambda f: f["path"])
    return {
        "format": FORMAT,
        "job_id": _job_id(),
        "attempt": context.attempt(),
        "step": step,
        # epoch, strategy, backend, optimizer_state, rng_state
        "epoch": described["epoch"], "strategy": described["strategy"], "backend": described["backend"],
        "optimizer_state": described["optimizer_state"], "rng_state": described["rng_state"],
        "world_size": context.world_size(),
        "sharded": sharded,
        # How the files are read back: one torch.save file, or torch.distributed.checkpoint's layout.
        "layout": "torch.distributed.checkpoint" if sharded else "torch.save",
        "files": files,
        "total_bytes": sum(f["size"] for f in files),
        "torch_version": torch.__version__,
        "created_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds"),
        # What the save cost the training loop: async, blocking_seconds (the longest any rank was
        # held, waiting for the previous save included) and background_seconds (rank 0's time from
        # handing the save to its thread until this manifest; null for a synchronous save).
        "save": timing,
        "metadata": dict(metadata or {}),
    }


def _pause_for_tests(variable: str, value: str | None = None) -> None:
    marker = os.environ.get(variable) if value is None else value
    if not marker:
        return
    with open(marker, "w") as fh:
        fh.write(str(os.getpid()))
    deadline = time.monotonic() + 3600
    while os.path.exists(marker) and time.monotonic() < deadline:
        time.sleep(0.02)


def _pause_after_write_for_tests() -> None:
    rank, _, marker = os.environ.get(ENV_PAUSE_AFTER_WRITE, "").partition(":")
    if marker and rank.strip() == str(context.rank()):
        _pause_for_tests(ENV_PAUSE_AFTER_WRITE, marker)


def apply_retention(store: Store, keep: int, newest: str | None = None) -> list[str]:
    """Delete committed checkpoints beyond the newest ``keep`` (keep < 1: keep all), and unfinished
    saves older than the newest commit. Returns the deleted step directories."""
    dirs = store.step_dirs()
    committed = sorted((d for d, ok in dirs.items() if ok), key=step_of, reverse=True)
    if not committed:
        return []
    newest_step = step_of(newest or committed[0])
    doomed = committed[keep:] if keep >= 1 else []
    # Unfinished saves older than the newest commit belong to runs that died; newer ones may be in flight.
    doomed += [
        d for d, ok in dirs.items() if not ok and step_of(d.removeprefix(STAGING_PREFIX)) < newest_step
    ]
    deleted = []
    for step_dir in doomed:
        try:
            store.delete(step_dir)
            deleted.append(step_dir)
        except Exception as exc:  # noqa: BLE001 - retention must never fail a save
            _warn(f"could not delete old checkpoint {step_dir}: {exc!r}")
    return deleted


_stager = Stager()


def save(
    state: Any,
    step: int,
    *,
    sharded: bool = False,
    metadata: dict[str, Any] | None = None,
    keep: int | None = None,
    async_: bool = False,
    epoch: int | None = None,
    tier: str = "disk",
) -> bool | PendingSave:
    """Save a checkpoint of ``state`` at ``step``; every rank must call it. Returns True once committed.

    ``tier="memory"`` keeps it in memory instead of the store (checkpointing.memory; ask
    ``memory_due(step)`` when): see save_to_memory.

    Replicated state (plain DDP: every rank holds the same weights) is written by rank 0 alone;
    with ``sharded=True`` every rank writes its own ``state``. ``metadata`` (JSON-able) goes into the
    manifest, and so do ``epoch`` (the script's: None when it counts none), the job's strategy, the
    process group's backend, and whether ``state`` holds optimizer state and random generator
    states (``optimizer_state``, ``rng_state``: see describe_state; keep ``rng_state()`` under
    ``rng``). Keeps the newest ``keep`` checkpoints (default: the job's checkpointing.keep, else 3).
    On any failure it warns, leaves no committed manifest and returns False: training can go on and
    the next save tries again. A committed checkpoint of the same step (left by an earlier attempt
    that got further) is replaced.

    With ``async_=True`` it copies the state into host memory (pinned for GPU tensors; the loop may
    change its tensors as soon as it returns), then writes, hashes and commits it on a background
    thread, and returns a ``PendingSave`` at once: ``.result()`` waits and says whether it
    committed. The commit rules are the same (all ranks or none, manifest last). One save is in
    flight at a time: the next save, a load_latest() or the end of the process waits for it, and
    ``wait()`` does so explicitly. In a distributed run the first async save creates a gloo
    process group for the checkpoints' own collectives (every rank calls save, so every rank joins).
    Call ``wait()`` before destroying the process group yourself.
    """
    if tier == "memory":
        return save_to_memory(state, step, metadata=metadata, epoch=epoch, sharded=sharded)
    if tier != "disk":
        raise ValueError(f"tier must be 'disk' or 'memory', not {tier!r}")
    started = time.perf_counter()
    step = int(step)
    background.wait(why=f"checkpoint at step {step}")
    # Read from the live state on the caller's thread, before a staged copy stands for it; only rank
    # 0 writes the manifest it goes into.
    described = describe_state(state, epoch) if context.rank() == 0 else None
    if not async_:
        committed = _save(state, step, sharded, metadata, keep, described, group=None, started=started,
                          background_started=None)
        _taught(step, time.perf_counter() - started)
        return committed

    group = background.checkpoint_group() if _group_active() else None
    # Replicated state is written by rank 0 alone: the other ranks have nothing to copy.
    writes = sharded or context.rank() == 0
    staged, staging_error = None, None
    try:
        staged = _stager.stage(state, stateful_to_dict=sharded) if writes else None
    except Exception as exc:  # noqa: BLE001 - the protocol below still runs, and fails on every rank
        staging_error = f"rank {context.rank()}: cannot copy the state ({exc!r})"
    metadata = copy.deepcopy(metadata)
    blocking = time.perf_counter() - started

    def work(background_started: float) -> bool:
        return _save(
            staged, step, sharded, metadata, keep, described, group=group, started=started,
            background_started=background_started, blocking=blocking, failed=staging_error,
        )  # fmt: skip

    pending = background.start(step, blocking, work)
    _taught(step, blocking)
    return pending


def wait() -> bool | None:
    """Wait for this process's latest async save if it is still in flight, and return whether it
    committed (None when there was no async save). Every rank should call it before leaving the
    process group."""
    pending = background.latest()
    return None if pending is None else pending.result()


def _save(
    state: Any,
    step: int,
    sharded: bool,
    metadata: dict | None,
    keep: int | None,
    described: StateDescription | None,  # rank 0's: only it writes the manifest
    *,
    group: Any,
    started: float,
    background_started: float | None,
    blocking: float | None = None,
    failed: str | None = None,
) -> bool:
    """The save protocol, on the caller's thread (``background_started`` None) or an async save's."""
    step_dir = step_dir_name(step)
    me = context.rank()
    store: Store | None = None

    prepared: bool | str | None = None  # rank 0's verdict: True, or why the store cannot take this save
    if me == 0:
        try:
            store = open_store(checkpoint_url())
            if store.read_manifest(step_dir) is not None:
                # Left by an earlier attempt that went further before it failed: that timeline was
                # abandoned when this one resumed from an older step, so this save replaces it.
                _warn(f"replacing the checkpoint at step {step} of an earlier run")
                store.delete(step_dir)
            store.prepare(step_dir)
            prepared = True
        except Exception as exc:  # noqa: BLE001 - a store problem must not end training
            prepared = f"cannot prepare {step_dir} in {checkpoint_url()}: {exc!r}"
    if sharded:
        # Every rank writes its part: each must know first that the store took the step.
        prepared = _from_rank0(prepared, group)
        if prepared is not True:
            if me == 0:
                _warn(f"checkpoint at step {step} not saved: {prepared}")
            return False
    # Replicated state is rank 0's to write: the others wait for no verdict (a collective fewer on
    # every save), and a store that could not prepare is rank 0's error in the exchange below.
    entries: list[FileEntry]
    error: str | None
    if failed is not None:
        entries, error = [], failed  # still take part in every collective below, or the others hang
    elif prepared is not True and me == 0:
        entries, error = [], str(prepared)
    else:
        entries, error = _write_data(store, step_dir, state, sharded, group)
    _pause_after_write_for_tests()
    # Every rank reaches this exchange, whatever happened to it: it is the barrier before the commit.
    results = _gather((entries, error, blocking), group)

    committed = False
    if me == 0:
        errors = list(dict.fromkeys(err for _, err, _ in results if err))
        if errors:
            _warn(f"checkpoint at step {step} not saved: {'; '.join(errors)}")
        else:
            written = [entry for rank_entries, _, _ in results for entry in rank_entries]
            _pause_for_tests(ENV_PAUSE_BEFORE_COMMIT)
            now = time.perf_counter()
            timing: SaveTiming
            if background_started is None:
                timing = {"async": False, "blocking_seconds": round(now - started, 3), "background_seconds": None}
            else:
                timing = {
                    "async": True,
                    "blocking_seconds": round(max(b or 0.0 for _, _, b in results), 3),
                    "background_seconds": round(now - background_started, 3),
                }
            committed = _commit(store, step_dir, step, written, sharded, metadata, timing,  # type: ignore[arg-type]
                                described)
        if not committed:
            with contextlib.suppress(Exception):
                store.discard(step_dir)  # type: ignore[union-attr]
    committed = bool(_from_rank0(committed, group))
    if committed and me == 0:
        apply_retention(store, settings()["keep"] if keep is None else keep, newest=step_dir)  # type: ignore[arg-type]
    return committed


def _write_data(
    store: Store | None, step_dir: str, state: Any, sharded: bool, group: Any
) -> tuple[list[FileEntry], str | None]:
    """This rank's part of a save: (manifest entries of the files it wrote, or why it failed)."""
    me = context.rank()
    if not sharded:
        if me != 0:
            return [], None  # replicated state: rank 0 holds the same bytes and writes them alone
        try:
            return [_write_own_file(store or open_store(checkpoint_url()), step_dir, "state.pt", state)], None
        except Exception as exc:  # noqa: BLE001
            return [], f"rank {me}: {exc!r}"

    from torchyard.sdk.checkpoint import sharded as dcp_format

    # torch.distributed.checkpoint is collective: every rank enters it, or none does.
    directory, private = None, False
    try:
        store = store or open_store(checkpoint_url())
        directory, private = dcp_format.prepare_directory(store, step_dir)
        problem = None
    except Exception as exc:  # noqa: BLE001
        problem = f"rank {me}: {exc}"
    problems = [p for p in _gather(problem, group) if p]
    try:
        if problems:
            return [], None if problem is None else problem
        try:
            return dcp_format.write(store, step_dir, directory, state, group), None  # type: ignore[arg-type]
        except Exception as exc:  # noqa: BLE001 - DCP fails on every rank, naming the ranks at fault
            return [], str(exc)
    finally:
        if directory is not None:
            dcp_format.cleanup(directory, private)


def _commit(
    store: Store,
    step_dir: str,
    step: int,
    entries: list[FileEntry],
    sharded: bool,
    metadata: dict | None,
    timing: SaveTiming,
    described: StateDescription | None,
) -> bool:
    try:
        if described is None:
            raise ValueError("only rank 0 describes the state it commits")
        manifest = _build_manifest(step, entries, sharded, metadata, timing, described)
        store.commit(step_dir, manifest)
    except Exception as exc:  # noqa: BLE001
        _warn(f"checkpoint at step {step} not committed: {exc!r}")
        return False
    try:
        store.write_latest(step_dir)
    except Exception as exc:  # noqa: BLE001 - the manifest is the commit; LATEST is a hint
        _warn(f"checkpoint at step {step} committed but LATEST not moved: {exc!r}")
    try:
        events.emit_checkpoint(step, store.manifest_uri(step_dir), manifest)
    except OSError as exc:  # committed all the same (a broken stdout when there is no event socket)
        _warn(f"checkpoint at step {step} committed but not announced: {exc!r}")
    return True


# --- the memory tier (checkpointing.memory) ----------------------------------------------------------
_replicator = memory_tier.Replicator()
_memory_warned = ""
MEMORY_FILE = "state.pt"


def memory_due(step: int) -> bool:
    """Whether the job keeps a checkpoint in memory at ``step`` (checkpointing.memory.every_n_steps;
    never when the job keeps none). Every rank gets the same answer."""
    every = memory_tier.every_n_steps()
    return every > 0 and int(step) % every == 0


def _memory_warning(why: str, step: int | None = None) -> None:
    """Said once until the reason changes: a buddy that is down would otherwise say it at every step."""
    global _memory_warned
    if why != _memory_warned:
        _warn(why if step is None else f"memory checkpoint at step {step} not kept: {why}")
        _memory_warned = why


def save_to_memory(state: Any, step: int, *, metadata: dict[str, Any] | None = None, epoch: int | None = None,
                   sharded: bool = False) -> bool | PendingSave:
    """Keep a checkpoint of ``state`` at ``step`` in memory: this machine's agent's and its buddies' on
    other machines (checkpointing.memory.replicas), committed in the job's checkpoints as the memory
    tier. A recovery resumes from the newest checkpoint that survives, memory or disk: the saving
    machine's copy when it lived, a buddy's when it did not, the store's when both are gone.

    Every rank calls it; the state is a replica every rank holds (DDP), so rank 0 keeps it for all and
    the others return True at once. Like an async save it copies the state into host buffers (reused
    from save to save) while the loop waits, then serializes it and sends it to the holders side by
    side on a background thread, and returns a PendingSave; the next save waits for it. A failure
    (a holder down, the budget full) warns and commits nothing: training goes on, and the previous
    checkpoint stays the one to recover from."""
    if sharded:
        raise ValueError("memory checkpoints keep a replicated state (DDP's); save a sharded state with tier='disk'")
    step = int(step)
    holders: list[memory_tier.Holder] = list(memory_tier.settings().get("holders") or [])
    if not holders:
        _memory_warning("this job keeps no memory checkpoints (checkpointing.memory is not set): nothing saved")
        return False
    if context.rank() != 0:
        return True
    started = time.perf_counter()
    background.wait()  # the previous save first: one in flight, and its buffers are the ones reused
    described = describe_state(state, epoch)
    try:
        staged = _stager.stage(state)
    except Exception as exc:  # noqa: BLE001 - a save never ends training
        _memory_warning(f"cannot copy the state ({exc!r})", step)
        return False
    metadata = copy.deepcopy(metadata)
    blocking = time.perf_counter() - started

    def work(background_started: float) -> bool:
        return _keep_in_memory(staged, step, holders, metadata, described, blocking, background_started)

    return background.start(step, blocking, work)


def _keep_in_memory(staged: Any, step: int, holders: list[memory_tier.Holder], metadata: dict | None,
                    described: StateDescription, blocking: float, background_started: float) -> bool:
    import hashlib
    import io

    import torch

    buffer = io.BytesIO()
    with skip_torch_crc32():
        torch.save(staged, buffer)
    data = buffer.getbuffer()
    try:
        sha256 = hashlib.sha256(data).hexdigest()
        path = memory_tier.job_path(_job_id() or 0, step, MEMORY_FILE)
        machines = _replicator.put_all(holders, path, data, sha256)
        size = len(data)
    except memory_tier.MemoryTierError as exc:
        _memory_warning(str(exc), step)
        return False
    finally:
        data.release()
    timing: SaveTiming = {"async": True, "blocking_seconds": round(blocking, 3),
                          "background_seconds": round(time.perf_counter() - background_started, 3)}
    manifest = _build_manifest(step, [FileEntry(MEMORY_FILE, size, sha256)], False, metadata, timing, described)
    manifest["files"][0]["holders"] = machines
    manifest["tier"] = "memory"
    uri = f"{protocol.MEMORY_SCHEME}job-{_job_id()}/step-{step}"
    try:
        events.emit_checkpoint(step, uri, manifest)
    except OSError as exc:
        _memory_warning(f"kept but not announced ({exc!r})", step)
        return False
    global _memory_warned
    _memory_warned = ""  # the next failure is news again
    return True


def _load_from_memory(map_location: Any, weights_only: bool) -> tuple[Any, int, Manifest] | None:
    """The memory checkpoint the control plane chose to resume from (TORCHYARD_RESUME_MANIFEST is a
    memory:// URI), read from the first living holder whose copy is whole; None, said, when there is
    none or a rank cannot read it (every rank then goes on to the store's checkpoints together)."""
    uri = os.environ.get(protocol.ENV_RESUME_MANIFEST, "").strip()
    if not uri.startswith(protocol.MEMORY_SCHEME):
        return None
    resume = memory_tier.settings().get("resume") or {}
    manifest: Manifest | None = resume.get("manifest")
    holders: list[memory_tier.Holder] = list(resume.get("holders") or [])
    state, machine, why = None, "", None
    files: list[Any] = list(manifest["files"]) if manifest is not None else []
    entry = next((f for f in files if f.get("path") == MEMORY_FILE), None)
    if manifest is None or entry is None:
        why = "the control plane sent no manifest for it"
    elif not holders:
        why = "no living machine holds it"
    else:
        try:
            data, machine = memory_tier.fetch(holders, memory_tier.job_path(_job_id() or 0, manifest["step"], MEMORY_FILE),
                                              int(entry["size"]), str(entry["sha256"]))
            import io

            import torch

            state = torch.load(io.BytesIO(data), map_location=map_location, weights_only=weights_only)
        except memory_tier.MemoryTierError as exc:
            why = str(exc)
        except Exception as exc:  # noqa: BLE001 - an unloadable copy is a checkpoint to skip
            why = f"it does not load ({exc!r})"
    if _all_agree(why is None) and manifest is not None:
        if context.rank() == 0:
            print(f"[torchyard] resuming from the memory checkpoint at step {manifest['step']}, "
                  f"held by {machine}", file=sys.stderr, flush=True)
        return state, int(manifest["step"]), manifest
    _warn(f"rank {context.rank()}: the memory checkpoint {uri} cannot be read"
          f"{': ' + why if why else ' on another rank'}; resuming from the store's newest checkpoint instead")
    return None


# --- load -----------------------------------------------------------------------------------------
def _candidates() -> list[tuple[str, str]]:
    """(store URL, step dir) to try in order: the resume manifest or LATEST, then older commits."""
    resume = os.environ.get(protocol.ENV_RESUME_MANIFEST, "").strip()
    root, first = checkpoint_url(), None
    if resume and not resume.startswith(protocol.MEMORY_SCHEME):  # a memory one was tried first
        try:
            root, first = split_manifest_uri(resume)
        except ValueError as exc:
            _warn(f"ignoring {protocol.ENV_RESUME_MANIFEST}: {exc}")
    store = open_store(root)
    committed = store.committed()
    if first is None:
        first = store.read_latest()
    if first is None:
        return [(store.url, d) for d in committed]
    return [(store.url, first)] + [(store.url, d) for d in committed if step_of(d) < step_of(first)]


def _load_replicated(store: Store, step_dir: str, manifest: Manifest, map_location, weights_only):
    """(state, None) or (None, why not) for the ``state.pt`` of one checkpoint."""
    name = "state.pt"
    entry = next((f for f in manifest["files"] if f.get("path") == name), None)
    if entry is None:
        return None, f"its manifest lists no {name}"
    try:
        local = store.fetch(step_dir, name)
    except Exception as exc:  # noqa: BLE001
        return None, f"{name} could not be read ({exc!r})"
    try:
        # One pass over the bytes: hashed in place in the page cache, then mapped by torch.load,
        # whose tensors use those same pages instead of a second copy. Nothing is unpickled
        # before its hash is known.
        size, sha256 = hash_file(local.path)
        if size != entry.get("size"):
            return None, f"{name} has {size} bytes, the manifest says {entry.get('size')}"
        if sha256 != entry.get("sha256"):
            return None, f"{name} fails its sha256 check"
        state, load_error = _torch_load(local.path, map_location, weights_only)
        if load_error is not None:
            return None, f"{name} does not load ({load_error})"
        return state, None
    except Exception as exc:  # noqa: BLE001
        return None, f"{name} could not be verified ({exc!r})"
    finally:
        with contextlib.suppress(OSError):
            local.cleanup()  # a temporary copy (S3) stays readable through the mapping until freed


def _torch_load(path: str, map_location, weights_only: bool):
    import mmap

    import torch
    from torch.utils.serialization import config

    # A private mapping: writing to a loaded tensor copies that page, never touches the file. The
    # option is process-wide, so it is only switched when someone chose shared mappings.
    private = config.load.mmap_flags == mmap.MAP_PRIVATE
    try:
        with contextlib.nullcontext() if private else torch.serialization.set_default_mmap_options(mmap.MAP_PRIVATE):
            return torch.load(path, map_location=map_location, weights_only=weights_only, mmap=True), None
    except Exception as exc:  # noqa: BLE001
        return None, repr(exc)


def every_n_steps(override: int | None = None) -> int:
    """How often to save: `override` (a recipe's --checkpoint-every) when given, else the job's
    checkpointing.every_n_steps; 0 when checkpointing is off. Under "auto" a fixed count
    (cadence.FIRST_STEPS): only cadence() adapts it."""
    every = _every(override)
    return cadence_module.FIRST_STEPS if every == AUTO else int(every)


def _every(override: int | None) -> int | str:
    if override is not None:
        return max(0, override)
    current = settings()
    return current["every_n_steps"] if current["enabled"] else 0


def cadence(override: int | None = None) -> Cadence:
    """When to save, step by step: ``cadence(args.checkpoint_every).due(step)``. A number of steps as
    every_n_steps() says, or under `every_n_steps: auto` the interval Young/Daly's rule gives from the
    measured cost of this job's saves and its machines' failure rate, revised at every save (see
    torchyard.sdk.checkpoint.cadence). Saves made with save() teach it; every rank must ask it."""
    global _cadence
    estimate = settings().get("cadence") or {}

    def announce(step: int, interval_s: float, line: str) -> None:
        if context.rank() == 0:
            cadence_module.print_line(line)
            events.report(step=step, checkpoint_interval_s=round(interval_s, 1))

    _cadence = Cadence(_every(override), mtbf_s=float(estimate.get("mtbf_seconds") or cadence_module.DEFAULT_MTBF_S),
                       why=str(estimate.get("why") or ""), agree=lambda steps: int(_from_rank0(steps)), announce=announce)
    return _cadence


def _taught(step: int, blocking_s: float) -> None:
    """A save's blocking time teaches the cadence (under "auto"): every rank, after the save."""
    if _cadence is not None:
        _cadence.saved(step, blocking_s)


def _read_manifest(store: Store, step_dir: str) -> Manifest | None:
    try:
        return store.read_manifest(step_dir)
    except Exception as exc:  # noqa: BLE001 - an unreadable manifest is a checkpoint to skip
        _warn(f"cannot read the manifest of {store.manifest_uri(step_dir)}: {exc!r}")
        return None


def load_latest(*, into: Any = None, map_location: Any = "cpu", weights_only: bool = True):
    """The newest good checkpoint as ``(state, step, manifest)``, or None when there is none.

    Tries the manifest named by TORCHYARD_RESUME_MANIFEST (set by the control plane on relaunch: a
    memory checkpoint's is read from a machine that holds it, see save_to_memory), else the one LATEST names, else the newest committed; every file is checked against the size and
    sha256 in its manifest, and a checkpoint that fails is reported and skipped for the previous
    committed one. In a distributed run call it after sdk.init_process_group(), on every rank: ranks
    agree on the checkpoint, so none resumes from a different step.

    Replicated checkpoints: ``state`` is what rank 0 saved; ``map_location`` and ``weights_only`` are
    torch.load's. Its CPU tensors are mapped from the verified file (torch.load's ``mmap=True``,
    private: a tensor written to gets its own copy of that page, the file is never changed), so
    loading costs one pass over the bytes; load them into the model and drop the state rather
    than keep it for the whole run when the store is a filesystem shared between machines. Sharded checkpoints load in place into ``into`` (required), a state dict shaped
    like the one saved (DTensor/FSDP shards, or ``Stateful`` objects), through
    torch.distributed.checkpoint, which reshards when this run's world size or layout differs from
    the saving run's; ``state`` is then ``into``. ``into`` is not used for replicated checkpoints.
    """
    background.wait(why="load_latest")  # this process's own save in flight commits first
    from_memory = _load_from_memory(map_location, weights_only)
    if from_memory is not None:
        return from_memory
    candidates = None
    # Without a process group (in_place: torchft's groups are the replicas') every rank reads for itself.
    reads = context.rank() == 0 or not _group_active()
    if reads:
        try:
            candidates = _candidates()
        except Exception as exc:  # noqa: BLE001
            _warn(f"cannot list checkpoints in {checkpoint_url()}: {exc!r}")
            candidates = []
    candidates = _from_rank0(candidates)
    stores: dict[str, Store] = {}
    for url, step_dir in candidates:
        store = stores.setdefault(url, open_store(url))
        # Rank 0 reads the manifest for all: the ranks must agree on it before a collective load.
        manifest = _from_rank0(_read_manifest(store, step_dir) if reads else None)
        state, why = None, None
        if manifest is None:
            why = "it has no readable manifest"
        elif manifest.get("step") != step_of(step_dir) or not isinstance(manifest.get("files"), list):
            why = "its manifest is malformed"
        elif manifest.get("sharded"):
            if into is None:
                raise RuntimeError(
                    f"checkpoint {store.manifest_uri(step_dir)} is sharded (torch.distributed.checkpoint): "
                    "pass the state to load it into, load_latest(into=state)"
                )
            from torchyard.sdk.checkpoint import sharded as dcp_format

            loaded, why = dcp_format.load(store, step_dir, manifest, into)
            state = into if loaded else None
        else:
            state, why = _load_replicated(store, step_dir, manifest, map_location, weights_only)
        if why is not None:
            _warn(
                f"rank {context.rank()}: checkpoint at step {step_of(step_dir)} ({store.manifest_uri(step_dir)}) "
                f"is unusable: {why}; falling back to the previous committed checkpoint"
            )
        if _all_agree(why is None):
            return state, step_of(step_dir), manifest
        if why is None and context.rank() == 0:
            _warn(f"checkpoint at step {step_of(step_dir)} is unusable on another rank; falling back")
    return None
