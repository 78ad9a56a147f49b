"""What every rank of a function job runs: `python -m torchyard.functions.runner` under the job's
launcher (torchrun by default), with torchrun's usual environment.

It loads the pickled function and its arguments (TORCHYARD_FUNCTION_PAYLOAD), calls it, and leaves
its outcome in TORCHYARD_RESULTS_DIR as two files the node supervisor collects when the node ends:
`rank-<R>.pkl` (the return value, or the exception, pickled by value) and `rank-<R>.json` (what the
API shows without unpickling: ok, size, repr, the exception's type, message and traceback text).

A rank whose function raised, or whose return value is over the limit, exits 1 after writing its
result: the node fails, and the supervisor tells the controller that retrying would not help.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
import traceback
import types
from pathlib import Path
from typing import Any

from torchyard import protocol
from torchyard.function_results import (
    META_FILE,
    REPR_LIMIT,
    RESULT_FILE_SUFFIX,
    ResultFile,
    result_stem,
    size_text,
)

EXIT_RAISED = 1


def _write(directory: Path, rank: int, data: bytes | None, meta: ResultFile) -> None:
    """Both files, atomically (a reader sees all of one or none): the pickle first, the JSON last."""
    directory.mkdir(parents=True, exist_ok=True)
    stem = result_stem(rank)
    if data is not None:
        tmp = directory / f".{stem}.pkl.tmp"
        tmp.write_bytes(data)
        os.replace(tmp, directory / f"{stem}.pkl")
    tmp = directory / f".{stem}.json.tmp"
    tmp.write_text(json.dumps(meta))
    os.replace(tmp, directory / f"{stem}{RESULT_FILE_SUFFIX}")


def _refiled(code: types.CodeType, filename: str) -> types.CodeType:
    consts = tuple(_refiled(c, filename) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def _restore_filename(function: Any, filename: str) -> None:
    """cloudpickle ships a function's code as "<dynamic-code>"; point it back at its file in this
    node's copy of the project, so a traceback shows the file and its lines as the caller knows them."""
    code = getattr(function, "__code__", None)
    if isinstance(code, types.CodeType) and code.co_filename == "<dynamic-code>" and os.path.isfile(filename):
        function.__code__ = _refiled(code, filename)


def _their_traceback(exc: BaseException) -> str:
    """The traceback from the function's own frame down: this runner's frame is no news to its caller."""
    tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None
    return "".join(traceback.format_exception(type(exc), exc, tb))


def _short_repr(value: Any) -> str:
    try:
        text = repr(value)
    except Exception as exc:  # a broken __repr__ must not lose the result
        text = f"<unrepresentable {type(value).__name__}: {exc!r}>"
    return text if len(text) <= REPR_LIMIT else text[: REPR_LIMIT - 1] + "…"


# What a collective raises in the ranks that outlive a failed peer (gloo's "Connection reset by
# peer", NCCL's aborted communicator, a store timeout): a consequence, not the job's own error.
_PEER_FAILURE = re.compile(r"gloo/transport|Connection (reset|closed) by peer|NCCL communicator was aborted|"
                           r"ProcessGroupNCCL|DistNetworkError|DistBackendError|DistStoreError|Broken pipe")


def peer_failure(exc: BaseException) -> bool:
    """Whether `exc` says another rank went away, rather than this rank's function failing."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    if names & {"DistError", "DistBackendError", "DistNetworkError", "DistStoreError"}:
        return True
    return isinstance(exc, RuntimeError | ConnectionError) and bool(_PEER_FAILURE.search(str(exc)))


def _failure(rank: int, error_type: str, message: str, trace: str, pickled: bytes | None,
             *, peer: bool = False) -> ResultFile:
    return {"rank": rank, "ok": False, "size": len(pickled or b""), "repr": "", "error_type": error_type,
            "error": message[:REPR_LIMIT], "traceback": trace[-20000:], "raised_at": time.time(),
            "peer_failure": peer}


def _pickled_exception(cloudpickle, exc: BaseException) -> bytes | None:
    try:
        return cloudpickle.dumps(exc)
    except Exception:
        return None  # the text is what matters; the caller rebuilds a RemoteError from it


def run(environ: dict[str, str] | None = None) -> int:
    """Call the function once in this rank and record its outcome; returns the exit code."""
    import cloudpickle

    environ = dict(os.environ) if environ is None else environ
    rank = int(environ.get("RANK") or 0)
    results = Path(environ[protocol.ENV_RESULTS_DIR])
    limit = int(environ.get(protocol.ENV_RESULT_MAX_BYTES) or 50 * 1024 * 1024)
    payload = Path(environ[protocol.ENV_FUNCTION_PAYLOAD])
    try:
        # Where the caller imported from inside its project: the same folders of this copy (the
        # working directory) go first on sys.path, before unpickling imports anything.
        meta_path = payload.with_name(META_FILE)
        meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
        for folder in reversed(meta.get("sys_path") or []):
            path = str((Path.cwd() / folder).resolve())
            if path not in sys.path:
                sys.path.insert(0, path)
        with open(payload, "rb") as handle:
            function, args, kwargs = cloudpickle.load(handle)
        if meta.get("source"):
            _restore_filename(function, str(Path.cwd() / meta["source"]))
    except Exception as exc:
        trace = traceback.format_exc()
        _write(results, rank, None, _failure(
            rank, type(exc).__name__,
            f"could not load the function on this node: {exc} (is every module it imports in the project "
            f"directory or in its requirements?)", trace, None))
        print(trace, file=sys.stderr, flush=True)
        return EXIT_RAISED
    try:
        value = function(*args, **kwargs)
    except BaseException as exc:  # SystemExit and KeyboardInterrupt too: the rank did not return
        trace = _their_traceback(exc)
        pickled = _pickled_exception(cloudpickle, exc)
        _write(results, rank, pickled, _failure(rank, type(exc).__name__, str(exc), trace, pickled,
                                                peer=peer_failure(exc)))
        print(trace, file=sys.stderr, flush=True)
        return EXIT_RAISED
    try:
        data = cloudpickle.dumps(value)
    except Exception as exc:
        trace = traceback.format_exc()
        _write(results, rank, None, _failure(
            rank, type(exc).__name__, f"the return value ({type(value).__name__}) cannot be pickled: {exc}", trace, None))
        print(trace, file=sys.stderr, flush=True)
        return EXIT_RAISED
    if len(data) > limit:
        message = (f"the return value of rank {rank} is {size_text(len(data))}, over the {size_text(limit)} limit "
                   f"for results; write it to $TORCHYARD_OUTPUT_DIR instead (collected as an artifact) and "
                   f"return its path")
        _write(results, rank, None, _failure(rank, "ResultTooLarge", message, "", None))
        print(f"torchyard: {message}", file=sys.stderr, flush=True)
        return EXIT_RAISED
    _write(results, rank, data, {"rank": rank, "ok": True, "size": len(data), "repr": _short_repr(value),
                                 "error_type": "", "error": "", "traceback": ""})
    return 0


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
