"""The fork server of one training Python (`python -m torchyard.warm.zygote SOCKET`).

It imports torch (and numpy) once, checks that the import left it with one thread, no CUDA context
and no stray file descriptor, then listens on a Unix socket. Each connection asks for one rank: the
server forks, the child becomes the rank (below) and the server answers with its pid, then with its
exit code when it ends (the server is its parent: it alone can wait for it). The server itself
never runs user code, and each child runs exactly one rank: nothing is reused between ranks, jobs
or attempts. It is single-threaded throughout, so a fork never copies a lock held by another thread.

The child, before the user's code: its own session (a stop signals the group), every descriptor of
the server closed, stdin /dev/null and stdout/stderr the rank's files, then the working directory,
umask, resource limits, environment, sys.argv and sys.path that a cold `python -u script` under
torchrun would have (the request carries them: the node's launcher reads its own), signal handlers
and mask back to Python's defaults, and the script run as `__main__`.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import selectors
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any, Literal, NotRequired, TypedDict

from torchyard import rank_main
from torchyard.warm import proctitle

# Read by the C libraries torch and numpy load as they import (OpenMP and OpenBLAS size their thread
# pools there; OpenBLAS starts its threads at once): one thread each, as torchrun gives every rank of
# a multi-process node. A rank whose environment says otherwise gets torch.set_num_threads().
IMPORT_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
# torch._dynamo: every optimizer's constructor imports it (torch._compile's disable decorator), 2-4 s of
# a rank's start that would otherwise come after the fork; torch.distributed.checkpoint for sharded
# checkpoints. Neither starts a thread (the pool refuses to serve if an import did).
PRELOAD = ("torch", "torch.distributed", "torch.nn", "torch.optim", "torch.utils.data", "numpy",
           "torch._dynamo", "torch.distributed.checkpoint")
MAX_REQUEST_BYTES = 8 * 1024 * 1024
# Variables read when Python starts or as torch and its libraries load: a rank whose environment
# sets them otherwise than the pool's would see the pool's values, so it starts cold (pools.py).
# (NCCL_*, CUDA_* and CUBLAS_* are read when a rank initialises them, after the fork: they are not.)
IMPORT_TIME_PREFIXES = ("PYTHON", "LD_", "TORCH_", "KMP_", "MKL_", "OPENBLAS_", "GOTO_", "MALLOC_", "GLIBC_", "OMP_")


# --- what goes over the socket (one JSON object a line) ---------------------------------------------
class HelloRequest(TypedDict):
    op: Literal["hello"]


class SpawnRequest(TypedDict):
    """Start one rank (warm/run.py asks): what a cold `python -u script` under torchrun would have."""

    op: Literal["spawn"]
    argv: list[str]  # the script and its arguments (with `module`: the arguments after argv[0])
    env: dict[str, str]
    cwd: str  # absolute, as are stdout and stderr: the rank's files
    stdout: str
    stderr: str
    umask: int
    module: NotRequired[str]  # `python -m module`
    rlimits: NotRequired[dict[str, list[int]]]  # RLIMIT_ name -> [soft, hard]


Request = HelloRequest | SpawnRequest


class Preloaded(TypedDict):
    """What importing left in the server: what a fork would copy."""

    import_s: float
    versions: dict[str, str]  # top-level module -> its __version__
    threads: int
    cuda_initialized: bool


class PoolHello(Preloaded):
    """The pool's account of itself, with its interpreter and the import-time environment it read."""

    python: str
    version: str  # Python's, "3.11.9"
    env: dict[str, str]


class HelloAnswer(PoolHello):
    """The answer to a hello: the pool's account, and how it is doing now."""

    pid: int
    forks: int
    fds: list[int]


class SpawnAnswer(TypedDict):
    """Sent twice for a spawn: with the rank's pid once forked, then with its exit code too."""

    pid: int
    exit: NotRequired[int]


class Refusal(TypedDict):
    error: str


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _open_fds() -> list[int]:
    return sorted(int(fd) for fd in os.listdir("/proc/self/fd") if int(fd) > 2)


def preload() -> Preloaded:
    """Import what every rank would import first; report what a fork would copy."""
    started = time.monotonic()
    versions: dict[str, str] = {}
    for name in PRELOAD:
        try:
            module = __import__(name)
        except ImportError:
            continue
        versions.setdefault(name.split(".")[0], str(getattr(module, "__version__", "")))
    cuda = False
    if "torch" in sys.modules:
        cuda = bool(sys.modules["torch"].cuda.is_initialized())
    return {"import_s": round(time.monotonic() - started, 3), "versions": versions, "threads": _threads(),
            "cuda_initialized": cuda}


# --- the child -------------------------------------------------------------------------------------
def _cold_sys_path(script_dir: str, pythonpath: str, base: list[str]) -> list[str]:
    """What sys.path a fresh `python script.py` would start with in this environment: the script's
    folder, then PYTHONPATH's entries, then the interpreter's own (the server's, which had no
    PYTHONPATH)."""
    extra = [p for p in pythonpath.split(os.pathsep) if p]
    return [script_dir, *extra, *[p for p in base if p not in extra]]


def _text_stream(fd: int, errors: str) -> io.TextIOWrapper:
    # As `python -u` (torchrun's ranks run so) and PYTHONUNBUFFERED: no buffering below the text layer.
    return io.TextIOWrapper(io.FileIO(fd, "w", closefd=False), encoding="utf-8", errors=errors, write_through=True)


def become_rank(request: SpawnRequest, base_path: list[str]) -> int:
    """In the forked child: turn into the rank the request describes and run it; its exit code."""
    os.setsid()
    for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1):
        signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    stdin = os.open(os.devnull, os.O_RDONLY)
    stdout = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    stderr = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(stdin, 0)
    os.dup2(stdout, 1)
    os.dup2(stderr, 2)
    os.closerange(3, os.sysconf("SC_OPEN_MAX") if os.sysconf("SC_OPEN_MAX") > 0 else 65536)
    streams = {"stdin": io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8"),
               "stdout": _text_stream(1, "strict"), "stderr": _text_stream(2, "backslashreplace")}
    for name, stream in streams.items():
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)
    os.umask(int(request["umask"]))
    for name, (soft, hard) in request.get("rlimits", {}).items():
        if name.startswith("RLIMIT_") and hasattr(resource, name):
            with contextlib.suppress(ValueError, OSError):
                resource.setrlimit(getattr(resource, name), (soft, hard))
    os.chdir(request["cwd"])
    env: dict[str, str] = request["env"]
    os.environ.clear()
    os.environ.update(env)
    if env.get("PYTHONFAULTHANDLER"):
        import faulthandler

        faulthandler.enable()
    sys.dont_write_bytecode = bool(env.get("PYTHONDONTWRITEBYTECODE"))
    threads = env.get("OMP_NUM_THREADS")
    if threads != IMPORT_ENV["OMP_NUM_THREADS"] and "torch" in sys.modules:
        # OpenMP read the server's value as torch loaded; what a cold start would have chosen instead.
        wanted = int(threads) if threads and threads.isdigit() and int(threads) > 0 else len(os.sched_getaffinity(0))
        sys.modules["torch"].set_num_threads(wanted)
    argv: list[str] = request["argv"]
    module = request.get("module") or ""
    script_dir = os.getcwd() if module else os.path.dirname(os.path.abspath(argv[0]))
    sys.path[:] = _cold_sys_path(script_dir, env.get("PYTHONPATH", ""), base_path)
    for name in [n for n in sys.modules if n == "torchyard" or n.startswith("torchyard.")]:
        del sys.modules[name]  # the server's copy: the rank imports the SDK from its own path, as cold
    # Before the user's code makes any process group: a rank never tears one down (rank_main.py says why).
    rank_main.keep_process_groups()
    # What ps and /proc show: the command a cold torchrun would have run, and the rank's environment
    # (its identity first: that is how a job's processes are found).
    command = [sys.executable, "-u", *(["-m", module, *argv[1:]] if module else argv)]
    with contextlib.suppress(OSError, ValueError, IndexError):
        proctitle.rewrite(command, env, first=("TORCHYARD_", "RANK", "LOCAL_RANK", "WORLD_SIZE"))
    return rank_main.run_main(module, argv)


# --- the server ------------------------------------------------------------------------------------
class Server:
    def __init__(self, path: Path, hello: PoolHello, agent_pid: int) -> None:
        self.path = Path(path)
        self.agent_pid = agent_pid
        self.hello = hello
        self.selector = selectors.DefaultSelector()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(self.path))
        os.chmod(self.path, 0o600)  # the agent's user only
        self.inode = self.path.stat().st_ino
        self.listener.listen(64)
        self.listener.setblocking(False)
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wakeup fd is written
        self.closing = False
        signal.signal(signal.SIGTERM, self._close_soon)
        self.selector.register(self.listener, selectors.EVENT_READ, "accept")
        self.selector.register(self.wake_r, selectors.EVENT_READ, "wake")
        self.children: dict[int, socket.socket] = {}
        self.buffers: dict[socket.socket, bytes] = {}
        self.forks = 0
        # The interpreter's own path, without the server's folder and PYTHONPATH (the rank has its own).
        own = {p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
        self.base_path = [p for p in sys.path[1:] if p not in own]

    def serve(self) -> SpawnRequest | None:
        """The server's loop. Returns only in a forked child, with its request."""
        while True:
            for key, _ in self.selector.select(timeout=1.0):
                if key.data == "accept":
                    with contextlib.suppress(BlockingIOError):
                        conn, _ = self.listener.accept()
                        conn.setblocking(True)
                        self.selector.register(conn, selectors.EVENT_READ, "conn")
                        self.buffers[conn] = b""
                elif key.data == "wake":
                    with contextlib.suppress(BlockingIOError):
                        os.read(self.wake_r, 4096)
                    self._reap()
                else:
                    request = self._read(key.fileobj)  # type: ignore[arg-type]
                    if request is not None:
                        child = self._handle(key.fileobj, request)  # type: ignore[arg-type]
                        if child is not None:
                            return child
            self._reap()
            if os.getppid() != self.agent_pid or self.closing:
                # The agent is gone (this was reparented, to init or a subreaper) or asks the pool to end: no new rank, and once the ranks it
                # forked have ended (their launchers wait for their exit codes), no pool.
                self._stop_listening()
                if not self.children:
                    return None

    def _close_soon(self, *_: Any) -> None:
        self.closing = True

    def _stop_listening(self) -> None:
        if self.listener.fileno() < 0:
            return
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(self.listener)
        self.listener.close()
        with contextlib.suppress(OSError):
            if self.path.stat().st_ino == self.inode:  # not a newer pool's socket at the same path
                self.path.unlink()

    def _read(self, conn: socket.socket) -> Request | None:
        try:
            data = conn.recv(65536)
        except OSError:
            data = b""
        if not data or len(self.buffers[conn]) + len(data) > MAX_REQUEST_BYTES:
            self._hang_up(conn)
            return None
        self.buffers[conn] += data
        if b"\n" not in self.buffers[conn]:
            return None
        line, _, self.buffers[conn] = self.buffers[conn].partition(b"\n")
        try:
            request = json.loads(line)
        except ValueError:
            request = None
        problem = _invalid(request)
        if problem:
            self._send(conn, {"error": problem})
            return None
        return request

    def _handle(self, conn: socket.socket, request: Request) -> SpawnRequest | None:
        if request["op"] == "hello":
            self._send(conn, {**self.hello, "pid": os.getpid(), "forks": self.forks, "threads": _threads(),
                              "fds": _open_fds()})
            return None
        pid = os.fork()
        if pid == 0:
            self._close_in_child()
            return request
        self.forks += 1
        self.children[pid] = conn
        self._send(conn, {"pid": pid})
        return None

    def _close_in_child(self) -> None:
        """Every descriptor the server holds, closed through its Python object (detached first, so no
        object closes a number the rank reuses later)."""
        signal.set_wakeup_fd(-1)
        self.selector.close()
        for sock in {self.listener, *self.buffers, *self.children.values()}:
            if sock.fileno() >= 0:
                os.close(sock.detach())
        os.close(self.wake_r)
        os.close(self.wake_w)
        self.buffers.clear()
        self.children.clear()

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            if conn is not None:
                self._send(conn, {"pid": pid, "exit": os.waitstatus_to_exitcode(status)})
                if conn not in self.buffers:
                    conn.close()  # its client hung up already

    def _send(self, conn: socket.socket, message: HelloAnswer | SpawnAnswer | Refusal) -> None:
        with contextlib.suppress(OSError):
            conn.sendall(json.dumps(message).encode() + b"\n")

    def _hang_up(self, conn: socket.socket) -> None:
        """The client closed (or misbehaved): forget it; a child's connection stays open until the
        child's exit is sent (nobody may read it: the client may be gone)."""
        self.buffers.pop(conn, None)
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(conn)
        for pid, owner in list(self.children.items()):
            if owner is conn:
                # Its launcher is gone (killed with its node): the rank lives no longer than it.
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)  # with whatever it started in its session
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)  # forked just now: maybe not its own group yet
                return
        conn.close()


def _invalid(request: Any) -> str:
    """Why a request cannot be served, or ""."""
    if not isinstance(request, dict) or request.get("op") not in ("hello", "spawn"):
        return "a request is a JSON object with op hello or spawn"
    if request["op"] == "hello":
        return ""
    argv, env = request.get("argv"), request.get("env")
    if not (isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)):
        return "argv must be a non-empty list of strings"
    if not (isinstance(env, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())):
        return "env must map strings to strings"
    for key in ("cwd", "stdout", "stderr"):
        if not isinstance(request.get(key), str) or not os.path.isabs(request[key]):
            return f"{key} must be an absolute path"
    if not isinstance(request.get("umask"), int) or not isinstance(request.get("module", ""), str):
        return "umask must be an integer and module a string"
    if not isinstance(request.get("rlimits", {}), dict):
        return "rlimits must map RLIMIT_ names to [soft, hard]"
    return ""


# Set by the agent that starts the pool (warm/pools.py): its own pid.
AGENT_PID_ENV = "TORCHYARD_WARM_AGENT_PID"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    path = Path(args[0])
    # The agent that started this pool says who it is: asked of getppid() here, an agent killed before
    # this line ran would leave init as the "agent", and the pool would serve on forever.
    agent_pid = int(os.environ.pop(AGENT_PID_ENV, "") or os.getppid())
    hello: PoolHello = {**preload(), "python": sys.executable, "version": sys.version.split()[0],
                        "env": {k: v for k, v in os.environ.items() if k.startswith(IMPORT_TIME_PREFIXES)}}
    refusal = ""
    if hello["threads"] != 1:
        refusal = f"importing torch left {hello['threads']} threads: forking would copy their state"
    elif hello["cuda_initialized"]:
        refusal = "importing torch initialised CUDA"
    if refusal:
        print(f"[torchyard warm] not serving {sys.executable}: {refusal}", file=sys.stderr, flush=True)
        return 3
    if os.getppid() != agent_pid:
        return 0  # the agent died while the imports ran: serve nothing, and leave its successor's socket be
    server = Server(path, hello, agent_pid)
    print(f"[torchyard warm] {sys.executable} ready on {path} ({hello['import_s']:.2f} s of imports)", flush=True)
    request = server.serve()
    if request is None:
        return 0
    try:
        code = become_rank(request, server.base_path)
    except OSError as exc:  # its working directory or files are gone: the launcher reports the code
        print(f"[torchyard warm] cannot start the rank: {exc}", file=sys.stderr, flush=True)
        code = 126
    rank_main.exit_now(code)
    return code


if __name__ == "__main__":
    os.environ.update(IMPORT_ENV)
    sys.exit(main())
