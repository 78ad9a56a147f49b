"""The node supervisor: runs torchrun for one node of one attempt and reports on it.

Modelled on torch elastic's agent (torch/distributed/elastic/agent/server/api.py): a state enum, a
result dataclass and one monitor loop. The loop tails every rank's log files, reads SDK datagrams,
sends heartbeats and resource samples, watches for a stop request or a hung torchrun, and publishes
it all to the Redis event stream. It ends with exactly one final state event and RUN_DIR/result.json.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

import psutil

from torchyard import protocol
from torchyard.bundles import size_text
from torchyard.protocol import NodeLaunch

from . import functions, prepare, ray_launch, warm_launch
from .argv import (
    CONFIG_FILE,
    LAUNCHER_COMMAND,
    LAUNCHER_NONE,
    LAUNCHER_TORCHRUN,
    OUTPUT_DIR,
    PID_FILE,
    RESULT_FILE,
    TORCHRUN_LOG_DIR,
    TORCHRUN_LOG_FILE,
    EntrypointError,
    build_command_argv,
    build_env,
    build_launcher_env,
    build_plain_argv,
    build_torchrun_argv,
    event_socket_path,
    link_sdk,
    plain_log_dir,
    resolve_entrypoint,
)
from .event_socket import EventSocket
from .network import interface_env
from .outputs import collect_outputs
from .preflight import MasterListener, PreflightError, reach_master, training_versions
from .proctree import TreeSampler, is_alive, kill_processes, process_tree, sweep_job_processes
from .publisher import EventPublisher
from .ray_logs import RayLogs
from .stall import StallWatch, examine
from .tail import FileTail, RankLogTailer
from .volumes import VolumeError, check_present, link_volumes, remove_probes, volume_env, write_probes

log = logging.getLogger(__name__)

# Event types the SDK may send over the socket; state, heartbeat and resource belong to the supervisor.
SDK_EVENT_TYPES = frozenset({protocol.METRIC, protocol.CHECKPOINT, protocol.LOG})

# torchrun 2.13 prints these (on stderr) when a local worker fails with --max-restarts 0: first it
# SIGTERMs the other local workers, then, once they are gone, it names the first failure.
_CLOSING_PEERS = re.compile(r"Sending process \d+ closing signal")
_FIRST_FAILURE = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+) \(pid: (\d+)\)")

ENV_STOP_GRACE = "TORCHYARD_SUPERVISOR_STOP_GRACE_S"
ENV_WATCHDOG = "TORCHYARD_SUPERVISOR_WATCHDOG_S"


class SupervisorState(StrEnum):
    """Where one supervisor is in its life.

    INIT       reading the launch, checking the entrypoint and the master port; torchrun not started.
    PREPARING  fetching the user's code bundle and building its environment (jobs with code), or a
               preflight that waits (for the master, or for the other nodes) longer than a moment.
    RUNNING    torchrun started; tailing, publishing, heart-beating.
    STOPPING   a stop was requested or the watchdog fired: torchrun's group got SIGTERM (or SIGKILL
               from the watchdog), SIGKILL follows after the grace period.
    COMPLETED  torchrun exited 0.                                              (final)
    FAILED     torchrun exited non-zero, never started, or was ended by the watchdog. (final)
    STOPPED    ended on request (SIGTERM/SIGINT to the supervisor).            (final)
    """

    INIT = "init"
    PREPARING = protocol.NODE_PREPARING
    RUNNING = "running"
    STOPPING = "stopping"
    COMPLETED = protocol.NODE_COMPLETED
    FAILED = protocol.NODE_FAILED
    STOPPED = protocol.NODE_STOPPED

    @property
    def is_final(self) -> bool:
        return self in (SupervisorState.COMPLETED, SupervisorState.FAILED, SupervisorState.STOPPED)


@dataclass
class SupervisorResult:
    """What RUN_DIR/result.json holds once the supervisor is done."""

    state: SupervisorState
    exit_code: int | None
    reason: str
    started_at: float
    ended_at: float
    supervisor_pid: int
    torchrun_pid: int | None = None
    torchrun_started_at: float | None = None
    last_lines: list[dict[str, Any]] = field(default_factory=list)
    swept_pids: list[int] = field(default_factory=list)
    events_published: int = 0
    events_dropped: dict[str, int] = field(default_factory=dict)
    final_state_delivered: bool = False
    results: list[dict[str, Any]] = field(default_factory=list)  # a function job's ranks on this node

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["state"] = self.state.value
        return data


@dataclass(frozen=True)
class SupervisorSettings:
    """Timings; the environment can override the two a test may want shorter."""

    # How often rank output and SDK events are read: half of it is what a line waits here on average.
    poll_interval_s: float = 0.05
    # torchrun ends its workers ~0.7 s after SIGTERM; the rest is margin for slow teardown.
    stop_grace_s: float = 5.0
    # How long torchrun may outlive a failed local worker (it waits up to 30 s on the others).
    watchdog_s: float = 10.0
    final_delivery_s: float = 30.0
    last_lines: int = protocol.FAILURE_LOG_LINES

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> SupervisorSettings:
        """Defaults, with $TORCHYARD_SUPERVISOR_STOP_GRACE_S and $TORCHYARD_SUPERVISOR_WATCHDOG_S applied."""
        environ = os.environ if environ is None else environ
        overrides: dict[str, Any] = {}
        for name, key in ((ENV_STOP_GRACE, "stop_grace_s"), (ENV_WATCHDOG, "watchdog_s")):
            raw = environ.get(name, "").strip()
            if raw:
                value = float(raw)  # a bad value fails loudly at start, not at the first stop
                if value <= 0:
                    raise ValueError(f"{name} must be positive, got {raw!r}")
                overrides[key] = value
        return cls(**overrides)


class _StopRequested(Exception):
    """A stop arrived while the node was still preparing."""


@dataclass(frozen=True)
class _Outcome:
    state: SupervisorState
    exit_code: int | None
    reason: str
    # Retrying cannot help: the job's own function raised (the controller fails the job at once).
    fatal: bool = False


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON so that a reader sees the old file or the whole new one, never half of it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    os.replace(tmp, path)


SECRET_MASK = "***"


def secret_masker(secrets: Mapping[str, str]) -> Callable[[str], str]:
    """A function that replaces every secret value in a line with ***: each line of a multi-line
    value too (logs arrive line by line), and its stripped form; the longest first, so a secret
    that holds another is masked whole."""
    values = {piece for value in secrets.values() for line in [value, *value.splitlines()]
              for piece in (line, line.strip()) if piece.strip()}
    if not values:
        return lambda line: line
    pattern = re.compile("|".join(re.escape(v) for v in sorted(values, key=len, reverse=True)))
    return lambda line: pattern.sub(SECRET_MASK, line)


def _signal_name(signum: int | None) -> str:
    if signum is None:
        return "no signal"
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _describe_exit(code: int) -> str:
    return f"was killed by {_signal_name(-code)}" if code < 0 else f"exited with code {code}"


_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def _terminate_with_parent() -> None:
    # Runs in the child between fork and exec: if the supervisor dies (even by SIGKILL), torchrun gets
    # SIGTERM and ends its workers, instead of training on unobserved.
    if _libc is not None:
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class NodeSupervisor:
    """Supervises one node: `run()` blocks until torchrun is gone and returns the SupervisorResult."""

    def __init__(
        self,
        launch: NodeLaunch,
        run_dir: Path,
        *,
        publisher: EventPublisher,
        code_root: Path,
        settings: SupervisorSettings | None = None,
    ) -> None:
        self.launch = launch
        self.run_dir = Path(run_dir)
        self.publisher = publisher
        self.code_root = Path(code_root)
        self.settings = settings or SupervisorSettings()
        self.state = SupervisorState.INIT
        self._stop_signal: int | None = None
        self._stop_sent = False
        self._kill_at: float | None = None
        self._proc: subprocess.Popen | None = None
        self._torchrun_started_at: float | None = None
        self._socket: EventSocket | None = None
        self._tailer: RankLogTailer | None = None
        self._torchrun_tail: FileTail | None = None
        self._ray_logs: RayLogs | None = None  # framework ray: the node's raylet and GCS logs
        # A warm start: where the launcher writes its ranks' pids (they are the pool's children).
        self._warm_pids_file: Path | None = None
        self._warm_ranks: list[psutil.Process] = []
        self._warm_pool: Path | None = None  # this node's pool, while it is to start warm
        self._cold_because = "the launcher is not torchrun"
        self._worker_failed_at: float | None = None
        self._first_failure: tuple[int, int] | None = None  # (exit code, local rank) as torchrun names it
        self._watchdog_fired = False
        self._torchrun_cut = False  # ended by us once its workers were gone (see _cut_torchrun_short)
        self._sampler = TreeSampler()
        self._listener: MasterListener | None = None  # node 0 holds the master port until torchrun takes it
        self._interface_env: dict[str, str] = {}
        self._preflight_since = 0.0
        self._stalls = StallWatch(launch.stall_timeout)
        self._stall_failure = ""
        self._function_env: dict[str, str] = {}  # a function job: where the ranks find it (functions.py)
        self._results: list[dict[str, Any]] = []
        self._last_line: dict[int, str] = {}  # global rank -> its newest log line
        # Every line and text the node publishes goes through it: a script that prints a secret
        # (JobSpec secret_env) shows ***. The per-rank files in the run directory keep what it wrote.
        self._mask = secret_masker(launch.secret_env)
        # What the node runs, as its reasons name it: torchrun, or (launcher none) python, or the command.
        self._what = {LAUNCHER_NONE: "python", LAUNCHER_COMMAND: "the command",
                      ray_launch.LAUNCHER_RAY: "Ray"}.get(launch.launcher, "torchrun")
        self._ray_temp: Path | None = None  # framework ray: the node's Ray --temp-dir, removed at the end
        # Where torchrun runs and with which Python: the run directory and the agent's Python for
        # the built-in recipes; a fresh copy of the bundle and its cached environment otherwise.
        self.workdir = self.run_dir
        self.python = launch.python or sys.executable
        self._next_prep_beat = 0.0
        keep = self.settings.last_lines
        self._recent: dict[str, deque[dict[str, Any]]] = {
            "prepare": deque(maxlen=keep),
            "stderr": deque(maxlen=keep),
            "stdout": deque(maxlen=keep),
            "torchrun": deque(maxlen=keep),
        }

    # --- public ------------------------------------------------------------------------------------
    def request_stop(self, signum: int = signal.SIGTERM) -> None:
        """Ask the monitor loop to stop the node (signal-handler safe: it only records the request)."""
        if self._stop_signal is None:
            self._stop_signal = signum

    def install_signal_handlers(self) -> None:
        """SIGTERM and SIGINT request a stop; the monitor loop acts on it within one poll interval."""
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda received, _frame: self.request_stop(received))

    def run(self) -> SupervisorResult:
        """Write the pid file, supervise torchrun to its end, publish the final state, write result.json."""
        started_at = time.time()
        pid_file = self.run_dir / PID_FILE
        pid_file.write_text(f"{os.getpid()}\n")
        try:
            outcome = self._supervise()
        except Exception as exc:
            # A bug here must still end the node cleanly and say why, not leave training unobserved.
            log.exception("supervisor error")
            outcome = _Outcome(
                SupervisorState.FAILED, None, f"node rank {self.launch.node_rank}: supervisor error: {exc!r}"
            )
        swept = self._wind_down()
        outcome = self._function_outcome(outcome)
        outcome = replace(outcome, reason=self._mask(outcome.reason))
        self.state = outcome.state
        last_lines = self._last_lines() if outcome.state is SupervisorState.FAILED else []
        self._emit_final_state(outcome, last_lines)
        delivered = self.publisher.drain(timeout_s=self.settings.final_delivery_s)
        if not delivered:
            log.error(
                "final state not delivered (%s); %d events lost",
                self.publisher.last_error,
                self.publisher.pending,
            )
        result = SupervisorResult(
            state=outcome.state,
            exit_code=outcome.exit_code,
            reason=outcome.reason,
            started_at=started_at,
            ended_at=time.time(),
            supervisor_pid=os.getpid(),
            torchrun_pid=self._proc.pid if self._proc else None,
            torchrun_started_at=self._torchrun_started_at,
            last_lines=last_lines,
            swept_pids=swept,
            events_published=self.publisher.published,
            events_dropped=dict(self.publisher.dropped),
            final_state_delivered=delivered,
            results=self._results,
        )
        write_json_atomic(self.run_dir / RESULT_FILE, result.to_dict())
        with contextlib.suppress(OSError):
            if pid_file.read_text().strip() == str(os.getpid()):
                pid_file.unlink()
        log.info("node %s: %s (%s)", self.launch.node_rank, outcome.state.value, outcome.reason)
        return result

    # --- start -------------------------------------------------------------------------------------
    def _supervise(self) -> _Outcome:
        node = f"node rank {self.launch.node_rank}"
        try:
            if self.launch.node_rank == 0 and self.launch.launcher != LAUNCHER_NONE:
                # At once, before preparing: the other nodes' preflight handshakes complete against it
                # meanwhile, and a taken port fails the node before any work.
                self._listener = MasterListener(self.launch.master_port)
            self._prepare()
            script = None if self.launch.module or self.launch.launcher == LAUNCHER_COMMAND else \
                resolve_entrypoint(self.launch.entrypoint, self.code_root)
            if self.launch.launcher == ray_launch.LAUNCHER_RAY and ray_launch.ray_missing(self.python):
                raise EntrypointError(ray_launch.MISSING_RAY)
            if self.launch.launcher == LAUNCHER_TORCHRUN:
                self._warm_pool, self._cold_because = warm_launch.choose(
                    self.launch, self.python, build_env(self.launch, self.run_dir, os.environ, workdir=self.workdir))
            self._preflight()
        except (prepare.PrepareError, EntrypointError, PreflightError) as exc:
            # A missing entrypoint, a volume this machine lacks or that is not shared, versions that
            # disagree: relaunching on the same machines would fail the same way.
            fatal = isinstance(exc, EntrypointError | VolumeError) or getattr(exc, "permanent", False)
            return _Outcome(SupervisorState.FAILED, None, f"{node}: {exc}; {self._what} not started", fatal=fatal)
        except _StopRequested:
            return _Outcome(SupervisorState.STOPPED, None, f"stop requested while {self.state.value}")
        finally:
            if self._listener is not None:
                self._listener.close()  # torchrun's store binds the port next
        if self._stop_signal is not None:
            return _Outcome(SupervisorState.STOPPED, None, f"stop requested before {self._what} started")
        try:
            self._start_torchrun(script)
        except (OSError, EntrypointError, ray_launch.RayLaunchError) as exc:
            return _Outcome(SupervisorState.FAILED, None, f"{node}: cannot start {self._what}: {exc}")
        exit_code = self._monitor()
        return self._outcome(exit_code)

    # --- preflight (preflight.py) ------------------------------------------------------------------
    def _preflight(self) -> None:
        """Every node of a multi-node job reaches the master's address and port and agrees with it on
        Python and torch, before any rank starts; raises PreflightError naming the cause."""
        launch = self.launch
        link_volumes(launch.volumes, self.workdir)  # relative mount_paths, in the final working directory
        self._interface_env = interface_env(launch.master_addr, launch.backend, build_env(launch, self.run_dir, os.environ))
        if launch.nnodes < 2 or launch.launcher == LAUNCHER_NONE:
            # One plain process per node makes its own rendezvous, maybe with a quorum of the nodes
            # (sdk.peers): no node waits here for all the others.
            return
        self._preflight_since = time.monotonic()
        interface = self._interface_env.get("GLOO_SOCKET_IFNAME", "")
        try:
            versions = training_versions(self.python)
            if self._listener is not None:
                peers = self._listener.serve(job_id=launch.job_id, attempt=launch.attempt,
                                             peers=set(range(1, launch.nnodes)), versions=versions,
                                             tick=self._preflight_tick, volumes=launch.volumes,
                                             warm=self._warm_pool is not None)
                self._all_warm(all(hello.get("warm") is True for hello in peers.values()))
                result: dict[str, Any] = {"role": "master", "peers": {
                    str(rank): {k: hello.get(k) for k in ("hostname", "address", "interface")}
                    for rank, hello in sorted(peers.items())}}
            else:
                hello = {"job": launch.job_id, "attempt": launch.attempt, "node_rank": launch.node_rank,
                         "hostname": socket.gethostname(), "interface": interface,
                         "python": versions.python, "torch": versions.torch, "warm": self._warm_pool is not None}
                # ReadWriteMany volumes: files the master must find in its own path of each (volumes.py).
                probes = write_probes(launch.volumes, job_id=launch.job_id, attempt=launch.attempt,
                                      node_rank=launch.node_rank)
                if probes:
                    hello |= {"machine": launch.volumes[0].get("machine", ""), "volumes": [p.hello() for p in probes]}
                try:
                    reached = reach_master(launch.master_addr, launch.master_port, hello, self._preflight_tick)
                finally:
                    remove_probes(probes)
                result = {"role": "node", **reached.to_dict()}
                self._all_warm(reached.warm)
        except PreflightError as exc:
            self.publisher.emit(protocol.PREFLIGHT, ok=False, error=str(exc), interface=interface,
                                hostname=socket.gethostname())
            raise PreflightError(f"preflight: {exc}") from exc
        self.publisher.emit(protocol.PREFLIGHT, ok=True, interface=interface, hostname=socket.gethostname(),
                            python=versions.python, torch=versions.torch,
                            seconds=round(time.monotonic() - self._preflight_since, 2), **result)
        where = f" through {interface}" if interface else ""
        self._publish_supervisor_line(
            f"preflight passed in {time.monotonic() - self._preflight_since:.2f} s: master "
            f"{launch.master_addr}:{launch.master_port}{where}, {versions.describe()} on every node"
            if result["role"] == "master" else
            f"preflight passed: reached the master {result['master']} from {result['local_address']}{where} "
            f"in {result['connect_ms']:.1f} ms, {versions.describe()} like the master")

    def _all_warm(self, agreed: bool) -> None:
        """The nodes of a job start alike (a warm rank hosts the rendezvous store itself, a cold
        torchrun's agent does): warm only when every node can."""
        if not agreed and self._warm_pool is not None:
            self._warm_pool = None
            self._cold_because = "another node of the job has no warm pool for its Python (a job's nodes start alike)"

    def _preflight_tick(self, phase: str) -> None:
        """Heartbeats and stop checks while preflight waits; past a moment the node says what it waits
        for (and stays clear of the controller's launch timeout, which only pending nodes are under)."""
        if self.state is SupervisorState.INIT and time.monotonic() - self._preflight_since > 2.0:
            self.state = SupervisorState.PREPARING
            self.publisher.emit(protocol.STATE, status=protocol.NODE_PREPARING, reason=f"preflight: {phase}",
                                supervisor_pid=os.getpid(), hostname=socket.gethostname())
        self._prep_tick()

    # --- preparing (the user's code) ---------------------------------------------------------------
    def _prepare(self) -> None:
        """Fetch the bundle into the machine's cache, copy it into a fresh working directory, and
        build (or reuse) the environment its requirements need. Nothing to do for a recipe."""
        check_present(self.launch.volumes)  # a missing volume fails the node before any work
        if not self.launch.code:
            return
        sha256 = str(self.launch.code["bundle"])
        self.state = SupervisorState.PREPARING
        self.publisher.emit(protocol.STATE, status=protocol.NODE_PREPARING,
                            reason=f"preparing code bundle {sha256[:12]}", supervisor_pid=os.getpid(),
                            hostname=socket.gethostname())
        self._prep_tick()
        cache = Path(self.launch.cache_dir) if self.launch.cache_dir else self.run_dir / "cache"
        bundle_dir = prepare.cached_bundle(prepare.BundleSource.of(self.launch), cache, wait=self._prep_tick, say=self._publish_prepare_line)
        self.workdir = prepare.make_workdir(bundle_dir, self.run_dir / "work")
        if self.launch.function:
            payload = prepare.BundleSource(self.launch.function["payload"], self.launch.server_url,
                                           self.launch.machine_token)
            self._function_env = functions.function_env(self.launch, self.run_dir, prepare.cached_bundle(
                payload, cache, wait=self._prep_tick, say=self._publish_prepare_line))
        self.code_root = self.workdir
        requirements = prepare.requirements_for(self.workdir, self.launch.pip)
        if requirements:
            self.python = prepare.prepared_environment(
                self.python, requirements, self.workdir, cache, pip=self.launch.pip,
                run=self._run_prepare_step, say=self._publish_prepare_line, wait=self._prep_tick,
                errors=lambda: [r["line"] for r in self._recent["prepare"] if "ERROR" in r["line"]],
            )
        self._prep_tick()

    def _run_prepare_step(self, argv: list[str]) -> int:
        """Run one preparation command (never a shell), streaming its output as the node's log lines
        and heart-beating meanwhile; a stop request ends it."""
        log_path = self.run_dir / "prepare.log"
        with open(log_path, "ab") as output:
            start = output.tell()
            proc = subprocess.Popen(argv, cwd=self.workdir, stdin=subprocess.DEVNULL, stdout=output,
                                    stderr=subprocess.STDOUT, start_new_session=True,
                                    env={**os.environ, "PIP_NO_INPUT": "1"})
        tail = FileTail(log_path)
        if start:
            tail.read_lines()  # skip earlier steps' output
        try:
            while True:
                code = proc.poll()
                for line in tail.read_lines(final=code is not None):
                    self._publish_prepare_line(line, source="pip" if "pip" in argv else "prepare")
                if code is not None:
                    return code
                try:
                    self._prep_tick()
                except _StopRequested:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    raise
                time.sleep(self.settings.poll_interval_s)
        finally:
            tail.close()

    def _prep_tick(self) -> None:
        """Heartbeats while preparing (the controller would call a silent node lost) and stop checks."""
        now = time.monotonic()
        if now >= self._next_prep_beat:
            self.publisher.emit(protocol.HEARTBEAT, status=self.state.value, pid=None,
                                pending_events=self.publisher.pending)
            self._next_prep_beat = now + max(self.launch.heartbeat_interval, self.settings.poll_interval_s)
        self.publisher.flush()
        if self._stop_signal is not None:
            raise _StopRequested()

    def _publish_prepare_line(self, line: str, source: str = "prepare") -> None:
        line = self._mask(line)
        self._recent["prepare"].append({"rank": None, "stream": "stdout", "line": line})
        self.publisher.emit(protocol.LOG, stream="stdout", line=line, source=source)

    # --- torchrun ----------------------------------------------------------------------------------
    def _start_torchrun(self, script: Path | None) -> None:
        write_json_atomic(self.run_dir / CONFIG_FILE, self.launch.config)
        (self.workdir / OUTPUT_DIR).mkdir(parents=True, exist_ok=True)
        link_sdk(self.run_dir, function=bool(self.launch.function))
        self._socket = EventSocket(event_socket_path(self.run_dir))
        torchrun = self.launch.launcher == LAUNCHER_TORCHRUN
        # Created before any folder of this launch exists: it ignores what an earlier one left.
        self._tailer = RankLogTailer(self.run_dir / TORCHRUN_LOG_DIR, self.launch.nproc_per_node if torchrun else 1)
        torchrun_log = self.run_dir / TORCHRUN_LOG_FILE
        ray: dict[str, Any] = {}
        env = self._launch_env(ray=self.launch.launcher == ray_launch.LAUNCHER_RAY)
        if torchrun:
            argv = self._warm_argv(script) or build_torchrun_argv(self.launch, self.run_dir, script,
                                                                         python=self.python)
            stdout_path = stderr_path = torchrun_log
        else:
            # One process per node: its stdout and stderr go where torchrun would put local rank
            # 0's, so tailing, masking and the failure's last lines work as they do for torchrun.
            if self.launch.launcher == ray_launch.LAUNCHER_RAY:
                argv, ray = self._ray_argv(script)
            else:
                argv = (build_plain_argv(self.launch, script, python=self.python)
                        if self.launch.launcher == LAUNCHER_NONE else build_command_argv(self.launch, python=self.python))
            log_dir = plain_log_dir(self.run_dir, self.launch)
            log_dir.mkdir(parents=True, exist_ok=True)
            stdout_path, stderr_path = log_dir / "stdout.log", log_dir / "stderr.log"
        # Truncated: the tails read them from the start.
        with open(stdout_path, "wb") as output, open(stderr_path, "ab") as errors:
            self._proc = subprocess.Popen(
                argv,
                env=env,
                cwd=self.workdir,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT if torchrun else errors,
                # Its own session: signals to the supervisor's group never reach it, and the whole
                # group can be signalled at once on stop.
                start_new_session=True,
                preexec_fn=_terminate_with_parent,  # safe: the supervisor starts no threads
            )
        if torchrun:
            self._torchrun_tail = FileTail(torchrun_log)
        self._torchrun_started_at = time.time()
        self.state = SupervisorState.RUNNING
        self.publisher.emit(
            protocol.STATE,
            status=protocol.NODE_RUNNING,
            reason=f"{self._what} started for global ranks {self._rank_range()}",
            pid=self._proc.pid,
            supervisor_pid=os.getpid(),
            hostname=socket.gethostname(),
            **({"ray": ray} if ray else {}),  # type: ignore[arg-type]
        )
        self.publisher.flush()

    def _launch_env(self, *, ray: bool) -> dict[str, str]:
        """The environment of torchrun (or the warm launcher, or the one process) and so of the ranks."""
        env = build_launcher_env(self.launch, build_env(self.launch, self.run_dir, os.environ, workdir=self.workdir))
        env.update(self._function_env)
        if ray:
            env = ray_launch.ray_env(env)
        env.update(volume_env(self.launch.volumes))
        if self._interface_env:
            env.update(self._interface_env)
            self._publish_supervisor_line(
                f"ranks reach the master {self.launch.master_addr} through "
                + ", ".join(f"{k}={v}" for k, v in sorted(self._interface_env.items())))
        return env

    def _warm_argv(self, script: Path | None) -> list[str] | None:
        """The warm launcher's argv when this node's Python has a warm pool that may serve it (its
        ranks are then forked there, torch already imported), else None; the node's log says which."""
        pool = self._warm_pool
        if pool is None:
            self._publish_supervisor_line(f"cold start (torchrun): {self._cold_because}")
            return None
        plan = warm_launch.build_plan(self.launch, self.run_dir, script, socket=pool, python=self.python)
        plan_file = self.run_dir / warm_launch.PLAN_FILE
        write_json_atomic(plan_file, plan)
        self._warm_pids_file = Path(plan["log_dir"]) / "pids.json"
        self._what = "the warm launcher"
        self._publish_supervisor_line(f"warm start: {self.launch.nproc_per_node} rank(s) forked from the warm pool "
                                      f"of {self.python} (torch already imported)")
        return warm_launch.launcher_argv(plan_file)

    def _ray_argv(self, script: Path | None) -> tuple[list[str], dict[str, Any]]:
        """framework ray: the runner's argv (ray_node.py), with its plan written to RUN_DIR/ray.json, and
        what the node's `running` event says of it (ports, temp dir, the dashboard on the head)."""
        launch = self.launch
        address = ray_launch.node_address(launch)
        ports = ray_launch.pick_ports(address, launch.node_rank == 0)
        self._ray_temp = ray_launch.temp_dir(launch, self.run_dir)
        self._ray_temp.mkdir(parents=True, exist_ok=True)
        self._ray_logs = RayLogs(self._ray_temp)
        shm_free = None
        with contextlib.suppress(OSError):
            shm_free = psutil.disk_usage("/dev/shm").free
        object_store = ray_launch.object_store_bytes(psutil.virtual_memory().available, shm_free)
        driver = build_plain_argv(launch, script, python=self.python) if launch.node_rank == 0 else None
        plan = ray_launch.build_plan(launch, self.python, driver, ports=ports, temp=self._ray_temp,
                                     object_store=object_store, timeout=ray_launch.quorum_timeout())
        plan_file = self.run_dir / ray_launch.RAY_PLAN_FILE
        write_json_atomic(plan_file, plan)
        info: dict[str, Any] = {"head": launch.node_rank == 0, "address": address, "gcs": ray_launch.head_address(launch),
                                "ports": ports, "temp_dir": str(self._ray_temp), "object_store_bytes": object_store,
                                "num_cpus": ray_launch.num_cpus(launch), "num_gpus": ray_launch.num_gpus(launch)}
        if launch.node_rank == 0:
            info["dashboard_port"] = ports["dashboard"]
        self._publish_supervisor_line(
            f"Ray {'head' if launch.node_rank == 0 else 'worker'} on {address}: {info['num_cpus']} CPU(s), "
            f"{info['num_gpus']} GPU(s), object store {size_text(object_store)}, ports "
            + ", ".join(f"{k}={v}" for k, v in ports.items()))
        return [self.python, "-m", ray_launch.RUNNER_MODULE, str(plan_file)], info

    def _rank_range(self) -> str:
        first = self.launch.rank_start
        return f"{first}-{first + self.launch.nproc_per_node - 1}"

    # --- monitor loop ------------------------------------------------------------------------------
    def _monitor(self) -> int:
        assert self._proc is not None
        next_beat = time.monotonic()
        while True:
            exit_code = self._proc.poll()
            self._drain_local_sources()
            now = time.monotonic()
            if self._stop_signal is not None and not self._stop_sent and exit_code is None:
                self._begin_stop(now)
            if self._kill_at is not None and now >= self._kill_at and exit_code is None:
                self._publish_supervisor_line(
                    f"{self._what} still running {self.settings.stop_grace_s:g} s after SIGTERM; sending SIGKILL"
                )
                self._kill_at = None  # once: a process SIGKILL cannot end is not retried every loop
                self._kill_torchrun_now()
            self._check_watchdog(now, exit_code)
            if exit_code is None:
                self._cut_torchrun_short(now)
            if exit_code is None and self.state is SupervisorState.RUNNING:
                self._check_stalls(now)
            if now >= next_beat and exit_code is None:
                self._beat()
                next_beat = now + max(self.launch.heartbeat_interval, self.settings.poll_interval_s)
            self.publisher.flush()
            if exit_code is not None:
                return exit_code
            if not self._more_to_read():
                time.sleep(self.settings.poll_interval_s)

    def _more_to_read(self) -> bool:
        """The ranks' files hold lines that the last read left for want of room, and there is room
        now: read on at once rather than after a poll interval."""
        return self._tailer is not None and not self._tailer.at_end and self.publisher.room > 0

    def _begin_stop(self, now: float) -> None:
        self._stop_sent = True
        self.state = SupervisorState.STOPPING
        # Ray: the driver gets a moment for its own SIGTERM; Ray's daemons need SIGKILL anyway.
        ray = self.launch.launcher == ray_launch.LAUNCHER_RAY
        self._kill_at = now + (min(1.0, self.settings.stop_grace_s) if ray else self.settings.stop_grace_s)
        self._publish_supervisor_line(
            f"stop requested ({_signal_name(self._stop_signal)}); sending SIGTERM to {self._what}"
        )
        self._signal_group(signal.SIGTERM)
        # A stopped process (SIGSTOP, a debugger let go) only acts on SIGTERM once continued.
        for proc in self._tree():
            with contextlib.suppress(psutil.Error):
                proc.send_signal(signal.SIGCONT)

    def _check_watchdog(self, now: float, exit_code: int | None) -> None:
        if (
            exit_code is not None
            or self._worker_failed_at is None
            or self.state is not SupervisorState.RUNNING
            or now - self._worker_failed_at < self.settings.watchdog_s
        ):
            return
        self._watchdog_fired = True
        self.state = SupervisorState.STOPPING
        self._publish_supervisor_line(
            f"a local worker failed and torchrun has not exited within {self.settings.watchdog_s:g} s; killing it"
        )
        self._kill_torchrun_now()

    def _cut_torchrun_short(self, now: float) -> None:
        """End torchrun as soon as it has nothing left to do. After its last worker is gone it still
        takes 0.6-1 s to tear itself down (a Python process with torch loaded), and a job's recovery
        waits for that twice: on the failed node, and on every node it stops. With --max-restarts 0 a
        failed worker means torchrun exits non-zero, and a stop means it ends: once its workers are
        gone (and it has named the first failure, or had half a second to), nothing is lost."""
        assert self._proc is not None
        if self._torchrun_cut or self.launch.launcher != LAUNCHER_TORCHRUN:
            return  # another launcher's process is the worker (or its parent): it ends by itself
        failed = self._worker_failed_at is not None and (
            self._first_failure is not None or now - self._worker_failed_at > 0.5)
        if not (failed or self._stop_sent):
            return
        if any(is_alive(p) for p in self._tree()[1:]):
            return
        self._torchrun_cut = True
        self._signal_group(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=5)

    def _beat(self) -> None:
        assert self._proc is not None
        self.publisher.emit(
            protocol.HEARTBEAT,
            status=self.state.value,
            pid=self._proc.pid,
            uptime_s=round(time.time() - (self._torchrun_started_at or time.time()), 1),
            pending_events=self.publisher.pending,
            dropped_events=sum(self.publisher.dropped.values()),
            steps=self._stalls.snapshot(time.monotonic()),
        )
        self.publisher.emit(protocol.RESOURCE, **self._sampler.sample(self._proc.pid, *self._rank_pids()))

    def _drain_local_sources(self, final: bool = False) -> None:
        """Turn new log lines and SDK datagrams into events (not yet sent)."""
        if self._tailer is not None:
            for item in self._tailer.poll(final=final, max_lines=self.publisher.room):
                rank = self.launch.rank_start + item.local_rank
                line = self._mask(item.line)
                self._recent[item.stream].append({"rank": rank, "stream": item.stream, "line": line})
                self._last_line[rank] = line
                self.publisher.emit(
                    protocol.LOG,
                    rank=rank,
                    stream=item.stream,
                    line=line,
                    local_rank=item.local_rank,
                    source="worker",
                )
        if self._torchrun_tail is not None:
            for line in map(self._mask, self._torchrun_tail.read_lines(final=final)):
                self._note_torchrun_line(line)
                self.publisher.emit(protocol.LOG, stream="stderr", line=line, source="torchrun")
        if self._ray_logs is not None:
            for line in map(self._mask, self._ray_logs.poll(final=final)):
                self.publisher.emit(protocol.LOG, stream="stderr", line=line, source="ray")
        if self._socket is not None:
            for event in self._socket.receive():
                self._publish_sdk_event(event)

    def _note_torchrun_line(self, line: str) -> None:
        self._recent["torchrun"].append({"rank": None, "stream": "stderr", "line": line})
        if self.state is not SupervisorState.RUNNING:
            return  # after our own SIGTERM, torchrun closing its workers is expected
        failure = _FIRST_FAILURE.search(line)
        if failure:
            self._first_failure = (int(failure.group(1)), int(failure.group(2)))
        if (failure or _CLOSING_PEERS.search(line)) and self._worker_failed_at is None:
            self._worker_failed_at = time.monotonic()

    def _publish_sdk_event(self, event: dict[str, Any]) -> None:
        event_type = event.pop("type")
        if event_type not in SDK_EVENT_TYPES:
            log.warning("ignoring an SDK event of type %r", event_type)
            return
        rank = event.pop("rank", None)
        rank = rank if isinstance(rank, int) and not isinstance(rank, bool) else None
        ts = event.pop("ts", None)
        step = event.get("step")
        if event_type == protocol.METRIC and rank is not None and isinstance(step, int) and not isinstance(step, bool):
            total = event.get("total_steps")
            self._stalls.step(rank, step, time.monotonic(),
                              total if isinstance(total, int) and not isinstance(total, bool) else None)
        self.publisher.emit(
            event_type,
            rank=rank,
            ts=ts if isinstance(ts, int | float) and not isinstance(ts, bool) else None,
            **event,
        )

    def _check_stalls(self, now: float) -> None:
        """Report each rank whose step stopped advancing (stall.py), with its stack; under
        `on_stall: recover` end the node as failed so the job recovers from its last checkpoint."""
        for seen in examine(self._stalls.stalled(now), self._rank_pid, self._mask):
            stall, pid, status, stack = seen.stall, seen.pid, seen.process_state, seen.stack
            summary = (f"global rank {stall.rank} stalled: no new step for {stall.stalled_for:g} s after step "
                       f"{stall.step} (its process is {status})")
            self.publisher.emit(protocol.STALLED, rank=stall.rank, step=stall.step, stalled_for=stall.stalled_for,
                                timeout=stall.timeout, process_state=status, pid=pid, stack=stack,
                                last_line=self._last_line.get(stall.rank, ""), hostname=socket.gethostname(),
                                on_stall=self.launch.on_stall, waits_in=seen.waits_in, frame=seen.frame)
            self._publish_supervisor_line(f"{summary}; its Python stack (py-spy):")
            for line in stack.splitlines()[:60]:
                self._publish_supervisor_line(f"  {line}")
            if self.launch.on_stall == "recover" and not self._stall_failure:
                self._stall_failure = f"{summary}; treated as a failure (on_stall: recover)"
                self.state = SupervisorState.STOPPING
                self._kill_torchrun_now()

    def _rank_pid(self, rank: int) -> int | None:
        """The pid of one of this node's ranks: torchrun's child whose RANK is `rank` (under another
        launcher the process itself may be the rank)."""
        tree = self._tree()
        for proc in tree[1:] + (tree[:1] if self.launch.launcher != LAUNCHER_TORCHRUN else []):
            try:
                if proc.environ().get("RANK") == str(rank):
                    return proc.pid
            except (psutil.Error, OSError):
                continue
        return None

    def _publish_supervisor_line(self, line: str) -> None:
        line = self._mask(line)
        log.info(line)
        self.publisher.emit(protocol.LOG, stream="stderr", line=line, source="supervisor")

    # --- end ---------------------------------------------------------------------------------------
    def _rank_pids(self) -> list[int]:
        """A warm start's rank pids, once its launcher has written them (the pool forked them: they are
        not under the launcher)."""
        if not self._warm_ranks and self._warm_pids_file is not None:
            with contextlib.suppress(OSError, ValueError, psutil.Error):
                # Process objects: psutil tells a pid reused by another process from the rank.
                self._warm_ranks = [psutil.Process(int(pid))
                                    for pid in json.loads(self._warm_pids_file.read_text()).values()]
        return [proc.pid for proc in self._warm_ranks if proc.is_running()]

    def _tree(self) -> list[psutil.Process]:
        """torchrun (or the launcher) and every process under it, then a warm start's ranks and theirs."""
        if self._proc is None:
            return []
        tree = process_tree(self._proc.pid)
        self._rank_pids()
        for rank in self._warm_ranks:
            with contextlib.suppress(psutil.Error):
                if rank.is_running():
                    tree += [proc for proc in [rank, *rank.children(recursive=True)] if proc not in tree]
        return tree

    def _signal_group(self, signum: int) -> None:
        assert self._proc is not None
        # torchrun leads its own session, so its pgid is its pid; signalling by pid avoids a lookup
        # that fails once it is a zombie.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, signum)

    def _kill_torchrun_now(self) -> None:
        """SIGKILL torchrun's group and every descendant (workers live in sessions of their own)."""
        if self._proc is not None and self.launch.launcher == ray_launch.LAUNCHER_RAY:
            # Ray's daemons (GCS, raylet, its workers) outlive the runner in its group, and SIGTERM
            # leaves some of them: the group is killed whether its leader is gone or not.
            tree = self._tree()
            self._signal_group(signal.SIGKILL)
            kill_processes(tree, sig=signal.SIGKILL)
        if self._proc is None or self._proc.poll() is not None:
            return
        tree = self._tree()  # read before the kill: orphans cannot be found from torchrun
        self._signal_group(signal.SIGKILL)
        kill_processes(tree, sig=signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=5)

    def _wind_down(self) -> list[int]:
        """Make sure nothing of this node runs on, read the last lines, release the socket and files.

        Each step on its own: whatever fails, the final state must still go out.
        """
        swept: list[int] = []
        steps = [
            self._kill_torchrun_now,
            lambda: swept.extend(self._sweep() if self._proc is not None else []),
            lambda: ray_launch.remove_temp_dir(self._ray_temp) if self._ray_temp else None,
            self._drain_to_the_end,
            self._close_local_sources,
            self._collect_results,
            self._collect_outputs,
        ]
        for step in steps:
            try:
                step()
            except Exception:
                log.exception("while winding down")
        return swept

    def _drain_to_the_end(self) -> None:
        """The ranks are gone: publish every line they left in their files, as fast as the event
        path takes them (the files hold a flood, not this process's memory), beating meanwhile so
        the node is not taken for lost. Gives up when nothing could be sent for final_delivery_s."""
        progress_at, next_beat = time.monotonic(), 0.0
        while True:
            published = self.publisher.published
            self._drain_local_sources(final=True)
            if self._tailer is None or self._tailer.at_end:
                return
            now = time.monotonic()
            if now >= next_beat:
                self.publisher.emit(protocol.HEARTBEAT, status=self.state.value, pid=None,
                                    pending_events=self.publisher.pending)
                next_beat = now + self.launch.heartbeat_interval
            self.publisher.flush()
            if self.publisher.published > published:
                progress_at = now
            elif now - progress_at > self.settings.final_delivery_s:
                log.error("the event path took nothing for %.0f s: the ranks' last lines stay unpublished",
                          self.settings.final_delivery_s)
                return
            if self.publisher.room == 0:
                time.sleep(self.settings.poll_interval_s)

    def _collect_results(self) -> None:
        """A function job: every rank's return value (or exception) into the store, one `result` event
        per rank, before the final state, so the job's results are complete once it has ended."""
        if not self.launch.function or self._proc is None:
            return
        self._results, failures = functions.collect(self.launch, self.run_dir)
        for result in self._results:
            payload: dict[str, Any] = {k: (self._mask(v) if isinstance(v, str) else v)
                                       for k, v in result.items() if k != "rank"}
            self.publisher.emit(protocol.RESULT, rank=result["rank"], **payload)
        for failure in failures:
            self._publish_supervisor_line(f"could not collect result {failure}")

    def _function_outcome(self, outcome: _Outcome) -> _Outcome:
        """A node that failed because the job's function raised says so (and that retrying is no use),
        rather than only that its launcher exited 1. Also when the controller's stop overtook the
        node's own end (another node's ranks saw this one's go away first): a rank that raised did
        not stop, and reporting it stopped would have the job relaunched to raise again."""
        failed = functions.raised(self._results)
        if failed is None or outcome.state is SupervisorState.COMPLETED:
            return outcome
        reason = (f"node rank {self.launch.node_rank}: global rank {failed['rank']} raised "
                  f"{failed.get('error_type')}: {failed.get('error')}")
        return _Outcome(SupervisorState.FAILED, outcome.exit_code, reason, fatal=True)

    def _collect_outputs(self) -> None:
        """Copy what the node wrote under its output directory into the store; one `artifact` event
        per batch of files, before the final state, so a finished job lists them all."""
        output_dir = self.workdir / OUTPUT_DIR
        if self._proc is None or not output_dir.is_dir():
            return
        destination = f"{self.launch.checkpoint_url.rstrip('/')}/artifacts/attempt-{self.launch.attempt}/node-{self.launch.node_rank}"
        collected, failures = collect_outputs(output_dir, destination)
        for start in range(0, len(collected), 200):
            self.publisher.emit(protocol.ARTIFACT, files=collected[start:start + 200])
        for failure in failures:
            self._publish_supervisor_line(f"could not collect output {failure}")
        if collected:
            total = sum(f["size"] for f in collected)
            self._publish_supervisor_line(f"collected {len(collected)} output file(s), {size_text(total)}")

    def _sweep(self) -> list[int]:
        swept = sweep_job_processes(
            self.launch.job_id, self.launch.attempt, self.launch.node_rank, run_dir=self.run_dir
        )
        if swept:
            self._publish_supervisor_line(f"killed {len(swept)} stray process(es) of this node: {swept}")
        return swept

    def _outcome(self, exit_code: int) -> _Outcome:
        node = f"node rank {self.launch.node_rank}"
        if self._stop_sent:
            return _Outcome(
                SupervisorState.STOPPED, exit_code, f"stop requested ({_signal_name(self._stop_signal)})"
            )
        detail = ""
        if self._first_failure is not None:
            worker_code, local_rank = self._first_failure
            detail = (
                f"; first failure: global rank {self.launch.rank_start + local_rank} (local rank {local_rank}) "
                f"{_describe_exit(worker_code)}"
            )
        if self._stall_failure:
            return _Outcome(SupervisorState.FAILED, exit_code, f"{node}: {self._stall_failure}")
        if self._watchdog_fired:
            return _Outcome(
                SupervisorState.FAILED,
                exit_code,
                f"{node}: a worker failed and torchrun did not exit within {self.settings.watchdog_s:g} s; "
                f"killed its process tree{detail}",
            )
        if self._torchrun_cut:
            # The exit code torchrun was about to return (any failed worker makes it exit 1).
            return _Outcome(SupervisorState.FAILED, 1,
                            f"{node}: torchrun failed, ended once its workers were gone{detail}")
        if exit_code == 0:
            return _Outcome(SupervisorState.COMPLETED, 0, f"{node}: {self._what} exited with code 0")
        return _Outcome(
            SupervisorState.FAILED, exit_code, f"{node}: {self._what} {_describe_exit(exit_code)}{detail}"
        )

    def _emit_final_state(self, outcome: _Outcome, last_lines: list[dict[str, Any]]) -> None:
        payload: dict[str, Any] = {
            "status": outcome.state.value,
            "exit_code": outcome.exit_code,
            "reason": outcome.reason,
        }
        if outcome.state is SupervisorState.FAILED:
            payload["last_lines"] = last_lines
        if outcome.fatal:
            payload["fatal"] = True
        self.publisher.emit(protocol.STATE, **payload)

    def _last_lines(self) -> list[dict[str, Any]]:
        """The newest lines that explain a failure: the preparation's when torchrun never started, else
        the workers' stderr, else their stdout, else torchrun's."""
        streams = ("stderr", "stdout", "torchrun") if self._proc is not None else ("prepare",)
        for stream in streams:
            if self._recent[stream]:
                return list(self._recent[stream])
        return []

    def _close_local_sources(self) -> None:
        if self._socket is not None:
            self._socket.close()
        if self._tailer is not None:
            self._tailer.close()
        if self._torchrun_tail is not None:
            self._torchrun_tail.close()
        if self._ray_logs is not None:
            self._ray_logs.close()
