"""Run a Python function on the cluster and get every rank's return value back (Kubetorch's
`kt.fn(train).to(compute).distribute(...)`, on the machines a team owns).

    remote = torchyard.fn(train).to(torchyard.Compute(cpus=2)).distribute(framework="pytorch", workers=2)
    results = remote(0.1)            # one value per rank, in global rank order

A call pickles the function and its arguments by value (cloudpickle), packs and uploads the caller's
project directory as a bundle (content-addressed: an unchanged project uploads nothing), uploads the
pickle as a small bundle of its own, and submits an ordinary job whose ranks run
`torchyard.functions.runner`: the job shows on the dashboard, streams its logs here, can be
stopped, and recovers from a lost node like any job. `remote.submit(...)` returns a FunctionRun at
once instead.

Decorators (`@torchyard.compute(...)`, `@torchyard.distribute(...)`) build the same thing and are
the identity inside a job (TORCHYARD_JOB_ID is set there), so importing the module on a node never
launches anything.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import io
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torchyard import protocol
from torchyard.bundles import pack_directory
from torchyard.function_results import (
    META_FILE,
    PAYLOAD_FILE,
    FunctionResults,
    PayloadMeta,
    RemoteError,
    ResultRow,
    first_failure,
)

from .compute import FRAMEWORKS, Compute, Distribution, FunctionError, NodeOptions

if TYPE_CHECKING:
    from torchyard.client.specfile import FunctionAsk, JobSpecBody, ResourcesAsk

RUNNER_MODULE = "torchyard.functions.runner"
# A directory with one of these is a project's root; the function's file is looked up from there.
PROJECT_MARKERS = (".git", "pyproject.toml", "setup.py", "setup.cfg", "requirements.txt", ".torchyardignore")
FINAL = {"completed", "failed", "stopped"}
POLL_S = 0.25


def on_node(environ: dict[str, str] | None = None) -> bool:
    """True inside a process Torchyard launched for a job."""
    return bool((os.environ if environ is None else environ).get(protocol.ENV_JOB_ID))


@dataclass(frozen=True)
class Connection:
    """The server and API token calls go to: TORCHYARD_SERVER and TORCHYARD_TOKEN by default."""

    server: str | None = None
    token: str | None = None

    def client(self):
        from torchyard.client.http import ApiClient

        server = self.server or os.environ.get("TORCHYARD_SERVER") or "http://127.0.0.1:8000"
        return ApiClient(server, self.token or os.environ.get("TORCHYARD_TOKEN"))


def project_root(function: Callable[..., Any]) -> Path:
    """The directory shipped with the function: the nearest folder at or above the function's file
    that holds a project marker (.git, pyproject.toml, requirements.txt ...), else the file's own
    folder; the current directory for a function typed into a notebook or a REPL."""
    try:
        source = inspect.getsourcefile(function)
    except TypeError:
        source = None
    if not source or source.startswith("<") or not os.path.exists(source):
        return Path.cwd().resolve()
    folder = Path(source).resolve().parent
    for candidate in (folder, *folder.parents):
        if candidate == Path.home() or candidate == candidate.parent:
            break
        if any((candidate / marker).exists() for marker in PROJECT_MARKERS):
            return candidate
    return folder


def _import_paths(root: Path) -> list[str]:
    """The caller's import folders inside the project, relative to it: the ranks put the same
    folders of their copy first on sys.path, so what the function imports resolves as it did here."""
    paths = []
    for entry in sys.path:
        try:
            resolved = Path(entry or os.curdir).resolve()
        except OSError:
            continue
        if resolved.is_relative_to(root):
            relative = resolved.relative_to(root).as_posix()
            if relative not in paths:
                paths.append(relative)
    return paths or ["."]


def _source_in(function: Callable[..., Any], root: Path) -> str:
    """The function's file relative to the project ("" when it has none there, as in a notebook)."""
    try:
        source = Path(inspect.getsourcefile(function) or "").resolve()
    except (TypeError, OSError):
        return ""
    return source.relative_to(root).as_posix() if source.is_file() and source.is_relative_to(root) else ""


def pickle_call(function: Callable[..., Any], args: tuple, kwargs: dict[str, Any]) -> bytes:
    """The payload the runner loads: (function, args, kwargs), by value."""
    import cloudpickle

    try:
        return cloudpickle.dumps((function, args, kwargs))
    except Exception as exc:
        name = getattr(function, "__qualname__", repr(function))
        raise FunctionError(f"cannot send {name} to the cluster: it (or an argument) cannot be pickled: "
                            f"{type(exc).__name__}: {exc}") from exc


def _python_minor() -> str:
    return f"{sys.version_info[0]}.{sys.version_info[1]}"


def check_python(api, minor: str) -> None:
    """Refuse, before any upload, a call no machine could unpickle: a function pickled on Python
    3.11 loads only on 3.11. Machines whose agent does not say are given the benefit of the doubt."""
    machines = [m for m in api.call("GET", "/api/machines") if m.get("status") in ("online", "busy")]
    versions = {m["name"]: str((m.get("capabilities") or {}).get("python_version") or "") for m in machines}
    known = {name: v for name, v in versions.items() if v}
    if not known or len(known) < len(versions):
        return
    if not any(".".join(v.split(".")[:2]) == minor for v in known.values()):
        found = ", ".join(f"{name} {v}" for name, v in sorted(known.items()))
        raise FunctionError(f"this Python is {minor}, and no online machine runs Python {minor} ({found}): a "
                            f"function pickled here cannot be loaded there. Call it from Python "
                            f"{'.'.join(next(iter(known.values())).split('.')[:2])}, or start an agent whose "
                            f"--python is {minor}.")


def _upload_payload(api, data: bytes, meta: PayloadMeta, console) -> str:
    """The pickle (and what the runner reads before unpickling it) as a small bundle of its own,
    content-addressed: the same call uploads nothing twice, and the project's bundle stays the same."""
    from torchyard.client.upload import push_bundle

    with tempfile.TemporaryDirectory(prefix="torchyard-fn-") as tmp:
        folder = Path(tmp) / "payload"
        folder.mkdir()
        (folder / PAYLOAD_FILE).write_bytes(data)
        (folder / META_FILE).write_text(json.dumps(meta, sort_keys=True))
        packed = pack_directory(folder, Path(tmp) / "payload.tar.zst")
        push_bundle(api, packed, console, what="function")
        return packed.sha256


@dataclass(frozen=True)
class RemoteFunction:
    """A function bound to compute and a distribution; call it (blocking) or `submit` it."""

    function: Callable[..., Any]
    compute: Compute = field(default_factory=Compute)
    distribution: Distribution = field(default_factory=Distribution)
    connection: Connection = field(default_factory=Connection)
    name: str | None = None
    project: str | None = None
    project_dir: Path | None = None
    result_max_bytes: int | None = None

    def __post_init__(self) -> None:
        if not callable(self.function):
            raise FunctionError(f"{self.function!r} is not callable")
        # Looks like the function it runs (help(), signatures, notebooks' tab completion).
        for name in functools.WRAPPER_ASSIGNMENTS:
            if hasattr(self.function, name):
                object.__setattr__(self, name, getattr(self.function, name))
        object.__setattr__(self, "__wrapped__", self.function)

    # --- building (each returns a new RemoteFunction) --------------------------------------------
    def to(self, compute: Compute | None = None, **options: Any) -> RemoteFunction:
        """On this compute (or `Compute(**options)`), and over its distribution when it carries one
        (`Compute(...).distribute(...)`); a `.distribute(...)` called after this wins."""
        chosen = compute if compute is not None else Compute(**options)
        return replace(self, compute=chosen, distribution=chosen.distribution or self.distribution)

    def distribute(self, framework: str = "pytorch", workers: int | tuple[int, int] = 1,
                   nproc_per_node: int | None = None, *, max_restarts: int | None = None,
                   worker_node_options: NodeOptions | None = None) -> RemoteFunction:
        """Across `workers` nodes (or an elastic range: `workers=(2, 4)`, as many as fit, at least 2)
        with `nproc_per_node` processes each (torchrun for "pytorch";
        "python" runs the function once per node with NODE_RANK, MASTER_ADDR ... set). "ray" counts
        as Kubetorch does: a Ray cluster of a head and `workers` worker nodes (workers + 1 nodes in
        all; 0: the head alone), the function run once, as the driver on the head, its return value
        the single result. `worker_node_options` ({"gpus", "cpus", "memory"}) is what each node of
        the job needs, the head's included, over the Compute's."""
        return replace(self, distribution=Distribution.of(framework, workers, nproc_per_node, max_restarts=max_restarts,
                                                          worker_node_options=worker_node_options))

    def using(self, *, server: str | None = None, token: str | None = None, project: str | None = None,
              project_dir: str | Path | None = None, name: str | None = None) -> RemoteFunction:
        """Another server, token, Torchyard project, directory to ship or job name."""
        return replace(self, connection=Connection(server or self.connection.server, token or self.connection.token),
                       project=project or self.project, name=name or self.name,
                       project_dir=Path(project_dir) if project_dir else self.project_dir)

    # --- running ----------------------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run on the cluster, streaming the job's logs here; the return values in rank order (framework
        ray: the driver's return value itself, the function running once). Raises RemoteError for the
        first rank that raised (the rest of the job is stopped). Ctrl-C stops the job."""
        run = self.submit(*args, **kwargs)
        try:
            run.follow()
        except KeyboardInterrupt:
            run.stop()
            raise
        values = run.result()
        return values[0] if self.distribution.framework == "ray" else values

    def submit(self, *args: Any, **kwargs: Any) -> FunctionRun:
        """Submit the call and return at once: a FunctionRun to wait on, follow, or stop."""
        from rich.console import Console

        root = (self.project_dir or project_root(self.function)).resolve()
        data = pickle_call(self.function, args, kwargs)
        api = self.connection.client()
        check_python(api, _python_minor())
        console = Console(stderr=True)
        from torchyard.client.upload import upload_project

        code = upload_project(api, root, console)
        meta: PayloadMeta = {"sys_path": _import_paths(root), "name": self.qualname,
                             "source": _source_in(self.function, root)}
        payload = _upload_payload(api, data, meta, console)
        job = api.call("POST", "/api/jobs", self.spec(code=code, payload=payload))
        return FunctionRun(api=api, job_id=int(job["id"]), name=self.qualname)

    @property
    def qualname(self) -> str:
        module = getattr(self.function, "__module__", "") or ""
        name = str(getattr(self.function, "__qualname__", None) or getattr(self.function, "__name__", "function"))
        return f"{module}.{name}" if module and module != "__main__" else name

    def spec(self, *, code: str, payload: str) -> JobSpecBody:
        """The JobSpec of one call."""
        dist, compute = self.distribution, self.compute
        if dist.worker_node_options:
            compute = replace(compute, **dict(dist.worker_node_options))  # cpus "4" read as Compute reads it
        nproc = dist.nproc_per_node or (compute.gpus if compute.gpus and dist.framework == "pytorch" else 1)
        resources: ResourcesAsk = {"nodes": dist.nodes, "procs_per_node": nproc, **compute.resources()}
        function: FunctionAsk = {"payload": payload, "name": self.qualname[:300], "python": _python_minor()}
        if self.result_max_bytes:
            function["result_max_bytes"] = self.result_max_bytes
        spec: JobSpecBody = {
            "name": (self.name or f"fn {self.qualname}")[:200],
            "code": {"bundle": code},
            "function": function,
            "resources": resources,
        }
        if dist.framework == "ray":
            spec["framework"] = "ray"
        else:
            spec["distributed"] = {"launcher": FRAMEWORKS[dist.framework]}
        if compute.labels:
            spec["placement"] = {"labels": dict(compute.labels)}
        pip, env = compute.pip(), compute.environment()
        if pip:
            spec["runtime"] = {"pip": pip}
        if compute.volumes:
            spec["volumes"] = [v.to_spec() for v in compute.volumes]
        if env:
            spec["env"] = env
        if dist.max_restarts is not None:
            spec["fault_tolerance"] = {"max_restarts": dist.max_restarts}
        if self.project:
            spec["project"] = self.project
        return spec


@dataclass
class FunctionRun:
    """A submitted call: its job, and the way to its results."""

    api: Any
    job_id: int
    name: str = ""

    def status(self) -> str:
        return str(self.api.call("GET", f"/api/jobs/{self.job_id}")["status"])

    def wait(self, timeout: float | None = None) -> str:
        """Block until the job has ended (its final status); TimeoutError after `timeout` seconds
        (the job keeps running)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            status = self.status()
            if status in FINAL:
                return status
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"job {self.job_id} ({self.name}) is still {status} after {timeout:g} s")
            time.sleep(POLL_S)

    def follow(self) -> str:
        """Stream the job's logs and progress to this terminal (or notebook) until it ends."""
        from rich.console import Console

        from torchyard.client.follow import JobFollower, JobRenderer

        console = Console()
        with JobRenderer(console, self.job_id) as renderer:
            JobFollower(self.api, self.job_id, renderer, console if renderer.live else Console(stderr=True)).run()
        return self.status()

    def result(self, timeout: float | None = None) -> list[Any]:
        """Every rank's return value in global rank order, once the job has ended. Raises RemoteError
        for the lowest rank that raised, or when the job failed or was stopped without results."""
        status = self.wait(timeout)
        answer: FunctionResults = self.api.call("GET", f"/api/jobs/{self.job_id}/results")
        results = answer["results"]
        failed = first_failure(results)
        if failed is not None:
            raise self._remote_error(failed)
        if status != "completed":
            job = self.api.call("GET", f"/api/jobs/{self.job_id}")
            raise RemoteError(job_id=self.job_id, rank=None, node_rank=None, machine="", error_type=status,
                              error=f"{status}: {job.get('status_reason') or 'no reason given'}")
        missing = sorted(set(range(int(answer["world_size"] or 0))) - {r["rank"] for r in results})
        if missing:
            raise RemoteError(job_id=self.job_id, rank=None, node_rank=None, machine="", error_type="MissingResults",
                              error=f"completed without a result from rank(s) {missing}")
        return [self._load(r) for r in sorted(results, key=lambda r: r["rank"])]

    def stop(self) -> None:
        """Stop the job (every node, every process)."""
        self.api.call("POST", f"/api/jobs/{self.job_id}/stop")

    def logs(self, limit: int = 10000) -> list[str]:
        """The job's log lines so far, oldest first, as `[rank R] line`."""
        page = self.api.call("GET", f"/api/jobs/{self.job_id}/logs?limit={limit}")
        return [f"[rank {e['rank']}] {e.get('line', '')}" if e.get("rank") is not None else str(e.get("line", ""))
                for e in page["events"]]

    def _download(self, rank: int) -> bytes:
        buffer = io.BytesIO()
        with self.api.download(f"/api/jobs/{self.job_id}/results/{rank}") as response:
            while block := response.read(1 << 20):
                buffer.write(block)
        return buffer.getvalue()

    def _load(self, result: ResultRow) -> Any:
        import cloudpickle

        return cloudpickle.loads(self._download(int(result["rank"])))

    def _remote_error(self, result: ResultRow) -> RemoteError:
        error = RemoteError(job_id=self.job_id, rank=result["rank"], node_rank=result.get("node_rank"),
                            machine=result.get("machine") or "?", error_type=result.get("error_type") or "Error",
                            error=result.get("error") or "", remote_traceback=result.get("traceback") or "")
        if result.get("has_value"):
            # The original exception, when it could travel (its class importable here).
            with contextlib.suppress(Exception):
                error.__cause__ = self._load(result)
        return error

    def __repr__(self) -> str:
        return f"<FunctionRun job {self.job_id} {self.name}>"


def fn(function: Callable[..., Any], **options: Any) -> RemoteFunction:
    """`torchyard.fn(train)`: the function, ready to be given compute (`.to`) and a distribution
    (`.distribute`) and called on the cluster. Options: name, project, project_dir, result_max_bytes."""
    if isinstance(function, RemoteFunction):
        return replace(function, **options) if options else function
    return RemoteFunction(function, **options)


def compute(compute: Compute | None = None, **options: Any) -> Callable[[Any], Any]:
    """Decorator: `@torchyard.compute(cpus=2, memory="4Gi")`. The identity inside a job."""
    chosen = compute if compute is not None else Compute(**options)

    def decorate(function: Any) -> Any:
        if on_node():
            return function
        return fn(function).to(chosen)

    return decorate


def distribute(framework: str = "pytorch", workers: int | tuple[int, int] = 1, nproc_per_node: int | None = None,
               **options: Any) -> Callable[[Any], Any]:
    """Decorator: `@torchyard.distribute(framework="pytorch", workers=2)`. The identity inside a job."""
    Distribution.of(framework, workers, nproc_per_node, **options)  # fail at the decorator's line

    def decorate(function: Any) -> Any:
        if on_node():
            return function
        return fn(function).distribute(framework, workers, nproc_per_node, **options)

    return decorate
