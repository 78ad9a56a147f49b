"""The node supervisor: the state machine that runs one node of one attempt and reports on it.

Modelled on torch elastic's agent (torch/distributed/elastic/agent/server/api.py): the policy is
here, a state enum and one monitor loop; the mechanism is in parts it composes, as the agent's is in
PContext:

    preparation.py    the user's code, its working directory and environment
    node_preflight.py every node reaches the master and agrees on versions, volumes, warm or cold
    commands.py       what the node runs (torchrun, the warm launcher, Ray, one process)
    ranks.py          its processes: start, find, signal, kill
    output_pump.py    rank logs, torchrun's log, Ray's logs and SDK datagrams -> events
    wind_down.py      a function job's results and the ranks' outputs, before the final state
    preemption.py     a preemption request's grace, and telling a yield from a failure

The loop tails, publishes, heart-beats, watches for a stop request, a hung torchrun or a stalled
rank, and ends with exactly one final state event and RUN_DIR/result.json.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import socket
import sys
import time
from dataclasses import replace
from pathlib import Path

from torchyard import protocol
from torchyard.bundles.cache import PrepareError
from torchyard.node.proctree import TreeSampler
from torchyard.protocol import NodeLaunch
from torchyard.stream_contract import LogLine, NodeStateEvent, ResultEvent, StalledEvent

from . import accelerate_launch, ray_launch, warm_launch
from .argv import (
    CONFIG_FILE,
    LAUNCHER_ACCELERATE,
    LAUNCHER_COMMAND,
    LAUNCHER_NONE,
    LAUNCHER_TORCHRUN,
    OUTPUT_DIR,
    PID_FILE,
    RESULT_FILE,
    TORCHRUN_LOG_DIR,
    TORCHRUN_LOG_FILE,
    EntrypointError,
    build_env,
    event_socket_path,
    link_sdk,
    resolve_entrypoint,
    runs_torchrun,
)
from .commands import node_command, what_runs
from .errors import first_error
from .event_socket import EventSocket
from .gpu_use import GpuUse, node_gpus
from .linger import Lingered, LingerWatch, end_lingering
from .memory import ranks_config
from .network import ifname_env, interface_env, interface_towards
from .node_preflight import run_preflight
from .output_pump import OutputPump, secret_masker
from .pace import PaceWatch
from .preemption import PreemptionWatch
from .preflight import MasterListener, PreflightError
from .preparation import Preparation
from .publisher import EventPublisher
from .ranks import RankProcesses
from .ray_logs import RayLogs
from .stall import Examined, SilenceWatch, Stall, StallWatch, examine
from .states import (
    Outcome,
    StopRequested,
    SupervisorResult,
    SupervisorSettings,
    SupervisorState,
    describe_exit,
    signal_name,
    write_json_atomic,
)
from .tail import FileTail, RankLogTailer
from .volumes import VolumeError, link_volumes
from .wind_down import collect_node_outputs, collect_results, function_outcome

log = logging.getLogger(__name__)

# torchrun 2.13 prints these (on stderr) when a local worker fails with --max-restarts 0: first it
# SIGTERMs the other local workers, then, once they are gone, it names the first failure.
_CLOSING_PEERS = re.compile(r"Sending process \d+ closing signal")
_FIRST_FAILURE = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+) \(pid: (\d+)\)")
# The warm launcher's word that it replaced a dead rank in place (warm/run.py Replacer).
_REPLACED = re.compile(r"\[torchyard warm\] (rank \d+ .*replaced in place.*)")

def _stall_summary(seen: Examined) -> str:
    stall = seen.stall
    if stall.silent:
        return (f"global rank {stall.rank} hung without a word: nothing printed or reported, no CPU used and every "
                f"thread waiting in the kernel for {stall.stalled_for:g} s (its process is {seen.process_state})")
    return (f"global rank {stall.rank} stalled: no new step for {stall.stalled_for:g} s after step {stall.step} "
            f"(its process is {seen.process_state})")


class NodeSupervisor:
    """Supervises one node: `run()` blocks until its processes are gone and returns the SupervisorResult."""

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
        self._ranks: RankProcesses | None = None
        # Every line and text the node publishes goes through the pump's mask: a script that prints
        # a secret (JobSpec secret_env) shows ***. The per-rank files in the run directory keep it.
        self.pump = OutputPump(publisher, secret_masker(launch.secret_env), rank_start=launch.rank_start,
                               keep=self.settings.last_lines, on_torchrun_line=self._note_torchrun_line,
                               on_step=self._on_step)
        self._warm_pool: Path | None = None  # this node's pool, while it is to start warm
        self._cold_because = "the launcher is not torchrun"
        self._worker_failed_at: float | None = None
        self._first_failure: tuple[int, int] | None = None  # (exit code, local rank) as torchrun names it
        self._watchdog_fired = False
        self._torchrun_cut = False  # ended by us once its workers were gone (see _cut_torchrun_short)
        self._ranks_done_at: float | None = None  # when every rank of the node was seen gone, none failed
        self._next_done_look = 0.0
        self._sampler = TreeSampler()
        self._gpus = GpuUse(node_gpus(launch.env))  # the node's GPUs' use, where NVML reads them
        self._listener: MasterListener | None = None  # node 0 holds the master port until torchrun takes it
        self._interface_env: dict[str, str] = {}
        self._network = ""  # the network the preflight pinned the job to ("": none)
        self._preflight_since = 0.0
        self._stalls = StallWatch(launch.stall_timeout)
        self._pace = PaceWatch(launch.pace_every) if launch.pace_every > 0 else None
        self._pace_pids: dict[int, int] = {}
        self._pace_pids_at = 0.0
        self._silence = SilenceWatch(launch.stall_timeout)  # ranks that report no steps
        self._next_silence_look = 0.0
        self._stall_failure = ""
        # Under on_stall: recover, a stall whose ranks here only wait on a peer: (deadline, why, ranks).
        self._victim_stall: tuple[float, str, list[int]] | None = None
        # Ranks that outlive the job's work (linger.py); Ray's workers end with its driver instead.
        self._linger = LingerWatch(launch.exit_grace, nnodes=launch.nnodes, node_rank=launch.node_rank,
                                   local_ranks=launch.nproc_per_node if runs_torchrun(launch) else 1,
                                   run_dir=self.run_dir) if launch.launcher != ray_launch.LAUNCHER_RAY else None
        self._lingered: list[Lingered] = []
        self._next_linger_look = 0.0
        self._function_env: dict[str, str] = {}
        self._results: list[ResultEvent] = []
        self._what = what_runs(launch)
        # Where the ranks run and with which Python (preparation.py may change both).
        self.workdir = self.run_dir
        self.python = launch.python or sys.executable
        self._next_prep_beat = 0.0
        self._preemption = PreemptionWatch(self.run_dir, launch.checkpoint_url)

    def _on_step(self, rank: int, step: int, total: int | None) -> None:
        now = time.monotonic()
        self._stalls.step(rank, step, now, total)
        if self._pace is not None:
            self._pace.step(rank, step, now)

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
        """Write the pid file, supervise the node to its end, publish the final state, write result.json."""
        started_at = time.time()
        pid_file = self.run_dir / PID_FILE
        pid_file.write_text(f"{os.getpid()}\n")
        try:
            outcome = self._supervise()
        except Exception as exc:
            # A bug here must still end the node cleanly and say why, not leave training unobserved.
            log.exception("supervisor error")
            outcome = Outcome(SupervisorState.FAILED, None,
                              f"node rank {self.launch.node_rank}: supervisor error: {exc!r}")
        swept = self._wind_down()
        outcome = function_outcome(self.launch, self._results, outcome)
        outcome = replace(outcome, reason=self.pump.mask(outcome.reason))
        self.state = outcome.state
        last_lines = self.pump.last_lines(started=self._ranks is not None) \
            if outcome.state is SupervisorState.FAILED else []
        self._emit_final_state(outcome, last_lines)
        delivered = self.publisher.drain(timeout_s=self.settings.final_delivery_s)
        if not delivered:
            log.error("final state not delivered (%s); %d events lost", self.publisher.last_error,
                      self.publisher.pending)
        result = SupervisorResult(
            state=outcome.state,
            exit_code=outcome.exit_code,
            reason=outcome.reason,
            started_at=started_at,
            ended_at=time.time(),
            supervisor_pid=os.getpid(),
            torchrun_pid=self._ranks.pid if self._ranks else None,
            torchrun_started_at=self._ranks.started_at if self._ranks else None,
            last_lines=last_lines,
            swept_pids=swept,
            events_published=self.publisher.published,
            events_dropped=dict(self.publisher.dropped),
            final_state_delivered=delivered,
            results=self._results,
        )
        write_json_atomic(self.run_dir / RESULT_FILE, result.to_dict())
        try:
            if pid_file.read_text().strip() == str(os.getpid()):
                pid_file.unlink()
        except OSError:
            pass
        log.info("node %s: %s (%s)", self.launch.node_rank, outcome.state.value, outcome.reason)
        return result

    # --- start -------------------------------------------------------------------------------------
    def _supervise(self) -> Outcome:
        node = f"node rank {self.launch.node_rank}"
        launch = self.launch
        try:
            if launch.node_rank == 0 and launch.launcher != LAUNCHER_NONE:
                # At once, before preparing: the other nodes' preflight handshakes complete against it
                # meanwhile, and a taken port fails the node before any work.
                self._listener = MasterListener(launch.master_port)
            prepared = Preparation(launch, self.run_dir, self.pump, python=self.python, tick=self._prep_tick,
                                   announce=self._announce_preparing,
                                   poll_interval=self.settings.poll_interval_s).run()
            self.workdir, self.python, self._function_env = prepared.workdir, prepared.python, prepared.function_env
            if launch.code:
                self.code_root = self.workdir
            script = None if launch.module or launch.launcher == LAUNCHER_COMMAND else \
                resolve_entrypoint(launch.entrypoint, self.code_root)
            if launch.launcher == ray_launch.LAUNCHER_RAY and ray_launch.ray_missing(self.python):
                raise EntrypointError(ray_launch.MISSING_RAY)
            if launch.launcher == LAUNCHER_ACCELERATE and accelerate_launch.accelerate_missing(self.python):
                raise EntrypointError(accelerate_launch.MISSING_ACCELERATE)
            if launch.launcher == LAUNCHER_TORCHRUN:
                self._warm_pool, self._cold_because = warm_launch.choose(
                    launch, self.python, build_env(launch, self.run_dir, os.environ, workdir=self.workdir))
            self._preflight()
        except (PrepareError, EntrypointError, PreflightError) as exc:
            # A missing entrypoint, a volume this machine lacks or that is not shared, versions that
            # disagree: relaunching on the same machines would fail the same way.
            fatal = isinstance(exc, EntrypointError | VolumeError) or getattr(exc, "permanent", False)
            return Outcome(SupervisorState.FAILED, None, f"{node}: {exc}; {self._what} not started", fatal=fatal)
        except StopRequested:
            return Outcome(SupervisorState.STOPPED, None, f"stop requested while {self.state.value}")
        finally:
            if self._listener is not None:
                self._listener.close()  # torchrun's store binds the port next
        if self._stop_signal is not None:
            return Outcome(SupervisorState.STOPPED, None, f"stop requested before {self._what} started")
        try:
            self._start(script)
        except (OSError, EntrypointError, ray_launch.RayLaunchError) as exc:
            return Outcome(SupervisorState.FAILED, None, f"{node}: cannot start {self._what}: {exc}")
        return self._outcome(self._monitor())

    def _announce_preparing(self, reason: str) -> None:
        self.state = SupervisorState.PREPARING
        # `scope` last, where ingest put it when supervisors left it out: the stored JSON is the same.
        self.publisher.emit({"type": protocol.STATE, "status": protocol.NODE_PREPARING, "reason": reason,
                             "supervisor_pid": os.getpid(), "hostname": socket.gethostname(), "scope": "node"})

    def _preflight(self) -> None:
        """Volumes linked into the final working directory, the interface towards the master chosen,
        then node_preflight.py's agreement; raises PreflightError naming the cause."""
        launch = self.launch
        link_volumes(launch.volumes, self.workdir)  # relative mount_paths, in the final working directory
        job_env = build_env(launch, self.run_dir, os.environ)
        self._interface_env = interface_env(launch.master_addr, launch.backend, job_env)
        self._preflight_since = time.monotonic()
        agreement = run_preflight(launch, self.pump, python=self.python,
                                  interface=self._interface_env.get("GLOO_SOCKET_IFNAME", ""),
                                  listener=self._listener, warm=self._warm_pool is not None,
                                  tick=self._preflight_tick, since=self._preflight_since,
                                  known=warm_launch.pool_versions(self._warm_pool) if self._warm_pool else None)
        self._network = agreement.network  # memory checkpoints cross it too
        if agreement.network and agreement.master_address and agreement.master_address != launch.master_addr:
            self._pin(agreement.network, agreement.master_address, job_env)
        if not agreement.all_warm and self._warm_pool is not None:
            # A warm rank hosts the rendezvous store itself, a cold torchrun's agent does: a job's
            # nodes start alike.
            self._warm_pool = None
            self._cold_because = "another node of the job has no warm pool for its Python (a job's nodes start alike)"
        if self._warm_pool is None and warm_launch.in_place(launch):
            self.pump.supervisor_line(f"fault_tolerance.mode in_place needs a warm start, and the nodes start cold "
                                      f"({self._cold_because}): a rank that dies restarts the attempt")

    def _pin(self, network: str, master_address: str, job_env: dict[str, str]) -> None:
        """The ranks' rendezvous and process group go through the network the preflight chose: the
        master's address on it, and this node's interface on it (unless the job named one itself)."""
        found = interface_towards(master_address)
        if found is None:
            self.pump.supervisor_line(f"links: this node has no route to the master's address {master_address} "
                                      f"on {network}: the ranks keep {self.launch.master_addr}")
            return
        self.launch = replace(self.launch, master_addr=master_address)
        # Empty when the job names its interfaces itself (GLOO_SOCKET_IFNAME ...): its choice stands.
        self._interface_env = ifname_env(found[0], self.launch.backend, job_env)

    def _preflight_tick(self, phase: str) -> None:
        """Heartbeats and stop checks while preflight waits; past a moment the node says what it waits
        for (and stays clear of the controller's launch timeout, which only pending nodes are under)."""
        if self.state is SupervisorState.INIT and time.monotonic() - self._preflight_since > 2.0:
            self._announce_preparing(f"preflight: {phase}")
        self._prep_tick()

    def _prep_tick(self) -> None:
        """Heartbeats while preparing (the controller would call a silent node lost) and stop checks."""
        now = time.monotonic()
        if now >= self._next_prep_beat:
            self.publisher.emit({"type": protocol.HEARTBEAT, "status": self.state.value, "pid": None,
                                 "pending_events": self.publisher.pending})
            self._next_prep_beat = now + max(self.launch.heartbeat_interval, self.settings.poll_interval_s)
        self.publisher.flush()
        if self._stop_signal is not None:
            raise StopRequested()

    def _start(self, script: Path | None) -> None:
        write_json_atomic(self.run_dir / CONFIG_FILE, ranks_config(self.launch, self._network))
        (self.workdir / OUTPUT_DIR).mkdir(parents=True, exist_ok=True)
        link_sdk(self.run_dir, function=bool(self.launch.function))
        torchrun = runs_torchrun(self.launch)
        # Created before any folder of this launch exists: it ignores what an earlier one left.
        tailer = RankLogTailer(self.run_dir / TORCHRUN_LOG_DIR, self.launch.nproc_per_node if torchrun else 1)
        command = node_command(self.launch, self.run_dir, self.workdir, self.pump, python=self.python, script=script,
                               warm_pool=self._warm_pool, cold_because=self._cold_because,
                               function_env=self._function_env, interface_env=self._interface_env)
        self._what = command.what
        # The socket before the ranks exist (a datagram sent to no socket is lost); torchrun's tail
        # after its log is truncated for this launch.
        events = EventSocket(event_socket_path(self.run_dir))
        ray_logs = RayLogs(command.ray_temp) if command.ray_temp else None
        self._ranks = RankProcesses(command, self.workdir)
        self.pump.attach(tailer=tailer, socket=events, ray_logs=ray_logs,
                         torchrun_tail=FileTail(self.run_dir / TORCHRUN_LOG_FILE) if command.torchrun_like else None)
        self.state = SupervisorState.RUNNING
        running: NodeStateEvent = {
            "type": protocol.STATE,
            "status": protocol.NODE_RUNNING,
            "reason": f"{self._what} started for global ranks {self._rank_range()}",
            "pid": self._ranks.pid,
            "supervisor_pid": os.getpid(),
            "hostname": socket.gethostname(),
            "scope": "node",
        }
        if command.ray:
            running["ray"] = command.ray
        self.publisher.emit(running)
        self.publisher.flush()

    def _rank_range(self) -> str:
        first = self.launch.rank_start
        return f"{first}-{first + self.launch.nproc_per_node - 1}"

    # --- monitor loop ------------------------------------------------------------------------------
    def _monitor(self) -> int:
        assert self._ranks is not None
        next_beat = time.monotonic()
        while True:
            published = self.publisher.published
            exit_code = self._ranks.poll()
            self.pump.drain()
            now = time.monotonic()
            if self._stop_signal is not None and not self._stop_sent and exit_code is None:
                self._begin_stop(now)
            if self._kill_at is not None and now >= self._kill_at and exit_code is None:
                self.pump.supervisor_line(
                    f"{self._what} still running {self.settings.stop_grace_s:g} s after SIGTERM; sending SIGKILL")
                self._kill_at = None  # once: a process SIGKILL cannot end is not retried every loop
                self._ranks.kill_now()
            self._check_watchdog(now, exit_code)
            if exit_code is None:
                self._cut_torchrun_short(now)
            if exit_code is None and self.state is SupervisorState.RUNNING:
                self._check_stalls(now)
                self._check_pace(now)
                self._check_lingering(now)
                self._check_preemption()
            if now >= next_beat and exit_code is None:
                self._beat()
                next_beat = now + max(self.launch.heartbeat_interval, self.settings.poll_interval_s)
            self.publisher.flush()
            if exit_code is not None:
                return exit_code
            if not self.pump.more_to_read():
                flowing = self.publisher.published > published
                time.sleep(self.settings.flowing_poll_s if flowing else self.settings.poll_interval_s)

    def _begin_stop(self, now: float) -> None:
        assert self._ranks is not None
        self._stop_sent = True
        self.state = SupervisorState.STOPPING
        # Ray: the driver gets a moment for its own SIGTERM; Ray's daemons need SIGKILL anyway.
        ray = self.launch.launcher == ray_launch.LAUNCHER_RAY
        self._kill_at = now + (min(1.0, self.settings.stop_grace_s) if ray else self.settings.stop_grace_s)
        self.pump.supervisor_line(f"stop requested ({signal_name(self._stop_signal)}); sending SIGTERM to {self._what}")
        self._ranks.signal_group(signal.SIGTERM)
        self._ranks.continue_all()

    def _check_watchdog(self, now: float, exit_code: int | None) -> None:
        if (
            exit_code is not None
            or self._worker_failed_at is None
            or self.state is not SupervisorState.RUNNING
            or now - self._worker_failed_at < self.settings.watchdog_s
        ):
            return
        assert self._ranks is not None
        self._watchdog_fired = True
        self.state = SupervisorState.STOPPING
        self.pump.supervisor_line(
            f"a local worker failed and torchrun has not exited within {self.settings.watchdog_s:g} s; killing it")
        self._ranks.kill_now()

    def _note_torchrun_line(self, line: str) -> None:
        if self.state is not SupervisorState.RUNNING or self._lingered:
            # After our own SIGTERM, torchrun closing its workers is expected; after a lingering
            # rank was ended, the failure torchrun names is that rank's SIGKILL.
            return
        replaced = _REPLACED.search(line)
        if replaced and self._ranks is not None:
            # On the job's timeline: the node goes on running, with one rank replaced.
            self.publisher.emit({"type": protocol.STATE, "status": protocol.NODE_RUNNING, "reason": replaced.group(1),
                                 "pid": self._ranks.pid, "supervisor_pid": os.getpid(),
                                 "hostname": socket.gethostname(), "scope": "node"})
            return
        failure = _FIRST_FAILURE.search(line)
        if failure:
            self._first_failure = (int(failure.group(1)), int(failure.group(2)))
        if (failure or _CLOSING_PEERS.search(line)) and self._worker_failed_at is None:
            self._worker_failed_at = time.monotonic()

    def _cut_torchrun_short(self, now: float) -> None:
        """End torchrun as soon as it has nothing left to do. After its last worker is gone it still
        takes 0.6-1 s to tear itself down (a Python process with torch loaded), and a job's recovery
        waits for that twice: on the failed node, and on every node it stops. With --max-restarts 0 a
        failed worker means torchrun exits non-zero, and a stop means it ends: once its workers are
        gone (and it has named the first failure, or had half a second to), nothing is lost.

        Nor once every rank exited 0 (a second ago, no failure named): torchrun would wait in its exit
        barrier until every other node's torchrun is done, holding the store its own ranks no longer
        use, and with it this node's completion; a node whose rank outlives the job's work (linger.py)
        would then never learn that every other rank is done. A warm node ends so too."""
        assert self._ranks is not None
        if self._torchrun_cut or not runs_torchrun(self.launch):
            return  # another launcher's process is the worker (or its parent): it ends by itself
        failed = self._worker_failed_at is not None and (
            self._first_failure is not None or now - self._worker_failed_at > 0.5)
        if not (failed or self._stop_sent or self._lingered or self._every_rank_exited_0(now)) \
                or self._ranks.workers_alive():
            return
        self._torchrun_cut = True
        self._ranks.signal_group(signal.SIGKILL)
        self._ranks.wait(5)

    def _every_rank_exited_0(self, now: float) -> bool:
        """Every rank of the node was seen and has been gone for a second, and torchrun named no failure."""
        assert self._ranks is not None
        if self._linger is None or self._worker_failed_at is not None or self._stop_sent or not self._linger.all_seen():
            return False
        if now < self._next_done_look:
            return self._ranks_done_at is not None and now - self._ranks_done_at >= 1.0
        self._next_done_look = now + 0.25  # a look at the process tree: not every loop
        if self._ranks.workers_alive():
            self._ranks_done_at = None
            return False
        if self._ranks_done_at is None:
            self._ranks_done_at = now
        return now - self._ranks_done_at >= 1.0

    def _beat(self) -> None:
        assert self._ranks is not None
        self.publisher.emit({
            "type": protocol.HEARTBEAT,
            "status": self.state.value,
            "pid": self._ranks.pid,
            "uptime_s": round(time.time() - self._ranks.started_at, 1),
            "pending_events": self.publisher.pending,
            "dropped_events": sum(self.publisher.dropped.values()),
            "steps": self._stalls.snapshot(time.monotonic()),
        })
        resource = self._sampler.sample(self._ranks.pid, *self._ranks.rank_pids())
        gpus = self._gpus.sample()
        if gpus:
            resource["gpus"] = gpus
        self.publisher.emit(resource)

    def _check_preemption(self) -> None:
        """A preemption request's grace (preemption.py): past it, stop the ranks like a stop request."""
        note = self._preemption.poll(time.time())
        if note.line:
            self.pump.supervisor_line(note.line)
        if note.stop:
            self.request_stop(signal.SIGTERM)

    def _check_stalls(self, now: float) -> None:
        """Report each rank whose step stopped advancing (stall.py), with its stack; under
        `on_stall: recover` end the node as failed so the job recovers from its last checkpoint."""
        assert self._ranks is not None
        ranks = self._ranks
        rank_pid = lambda rank: ranks.rank_pid(rank, launcher_may_be_rank=not runs_torchrun(self.launch))  # noqa: E731
        examined = examine(self._stalls.stalled(now) + self._silent_ranks(now), rank_pid, self.pump.mask)
        if not any(seen.stall.silent and seen.suspicion < 2 for seen in examined):
            # Silence alone names a hang only where a silent rank is outside any collective (or stopped,
            # gone, in D state): one that waits in a collective may wait on a peer that is busy without a
            # word (rank 0 preparing the data), not hung. Looked at again after another timeout.
            for seen in examined:
                if seen.stall.silent:
                    self._silence.not_yet(seen.stall.rank, now)
            examined = [seen for seen in examined if not seen.stall.silent]
        for seen in examined:
            stall, pid, status, stack = seen.stall, seen.pid, seen.process_state, seen.stack
            stalled: StalledEvent = {
                "type": protocol.STALLED, "step": stall.step, "stalled_for": stall.stalled_for,
                "timeout": stall.timeout, "timeout_basis": stall.basis, "process_state": status, "pid": pid,
                "stack": stack, "last_line": self.pump.last_line.get(stall.rank, ""), "hostname": socket.gethostname(),
                "on_stall": "recover" if self.launch.on_stall == "recover" else "report", "waits_in": seen.waits_in, "frame": seen.frame}
            if stall.silent:
                stalled["silent"] = True
            self.publisher.emit(stalled, rank=stall.rank)
            self.pump.supervisor_line(f"{_stall_summary(seen)}; its Python stack (py-spy):")
            for line in stack.splitlines()[:60]:
                self.pump.supervisor_line(f"  {line}")
        if self.launch.on_stall != "recover" or self._stall_failure:
            return
        if examined:
            worst = examined[0]  # the most suspicious first
            if worst.suspicion < 2:
                self._fail_for_stall(_stall_summary(worst))
                return
            if self._victim_stall is None:
                grace = self.settings.victim_grace_s
                self._victim_stall = (now + grace, _stall_summary(worst), [s.stall.rank for s in examined])
                self.pump.supervisor_line(
                    f"the stalled ranks here wait on a peer: the node holding them has {grace:g} s to end "
                    "the attempt before this one does (on_stall: recover)")
        if self._victim_stall is not None and now >= self._victim_stall[0]:
            _, summary, waiting = self._victim_stall
            self._victim_stall = None
            if self._stalls.still_stalled(waiting) or self._silence.still_silent(waiting):
                self._fail_for_stall(summary)

    def _check_lingering(self, now: float) -> None:
        """End each rank that outlives the job's work (linger.py): its stack first, then SIGKILL."""
        if self._linger is None or now < self._next_linger_look:
            return
        assert self._ranks is not None
        self._next_linger_look = now + 0.5
        if not self._linger.all_seen():
            found, gone = self._ranks.rank_processes(self.launch.rank_start, one_process=not runs_torchrun(self.launch))
            for unit, proc in found.items():
                self._linger.see(unit, proc)
            for unit in gone:
                self._linger.gone(unit)
        failed = bool(self._worker_failed_at is not None or self._stop_sent or self._stall_failure)
        for rank, proc, waited, returned in self._linger.check(now, failed=failed):
            ended = end_lingering(rank, proc, waited, returned, self.pump.mask)
            self._lingered.append(ended)
            self.pump.supervisor_line(f"{ended.summary()}; its stack (py-spy, with native frames):")
            for line in ended.stack.splitlines()[:80]:
                self.pump.supervisor_line(f"  {line}")

    def _check_pace(self, now: float) -> None:
        """Sample each rank's main thread (pace.py) and publish the window's `pace` when it is over."""
        if self._pace is None or self._linger is None or self._ranks is None:
            return
        if now >= self._pace_pids_at:  # the ranks' processes, looked up again now and then
            self._pace_pids = {rank: proc.pid for rank, proc in self._linger.alive().items() if rank is not None}
            self._pace_pids_at = now + 2.0
        self._pace.sample(self._pace_pids, now)
        if self._pace.due(now):
            own = {os.getpid(), *(proc.pid for proc in self._ranks.tree())}
            payload = self._pace.report(self._pace_pids, now, own_pids=own)
            if payload is not None:
                self.publisher.emit(payload)

    def _silent_ranks(self, now: float) -> list[Stall]:
        """Ranks that report no steps and hang without a word (stall.py SilenceWatch); their
        processes are the ones the linger watch found."""
        if self._linger is None or now < self._next_silence_look:
            return []
        self._next_silence_look = now + 1.0
        found = []
        for unit, proc in self._linger.alive().items():
            rank = unit if unit is not None else self.launch.node_rank
            if self._stalls.reports(rank) or self._linger.finishing(unit):
                continue  # its steps say whether it moves (StallWatch), or its work is done (linger.py)
            stall = self._silence.look(rank, proc, self.pump.heard_at.get(rank, 0.0), now)
            if stall is not None:
                found.append(stall)
        return found

    def _fail_for_stall(self, summary: str) -> None:
        assert self._ranks is not None
        self._stall_failure = f"{summary}; treated as a failure (on_stall: recover)"
        self.state = SupervisorState.STOPPING
        self._ranks.kill_now()

    # --- end ---------------------------------------------------------------------------------------
    def _wind_down(self) -> list[int]:
        """Make sure nothing of this node runs on, read the last lines, release the socket and files,
        hand over results and outputs. Each step on its own: whatever fails, the final state must
        still go out."""
        swept: list[int] = []
        ranks = self._ranks
        steps = []
        if ranks is not None:
            steps += [ranks.kill_now, lambda: swept.extend(self._sweep())]
            if (ray_temp := ranks.command.ray_temp) is not None:
                steps.append(lambda: ray_launch.remove_temp_dir(ray_temp))
        steps += [self._drain_to_the_end, self.pump.close]
        if ranks is not None:
            steps += [lambda: self._results.extend(collect_results(self.launch, self.run_dir, self.pump)),
                      lambda: collect_node_outputs(self.launch, self.workdir, self.pump)]
        for step in steps:
            try:
                step()
            except Exception:
                log.exception("while winding down")
        return swept

    def _drain_to_the_end(self) -> None:
        def heartbeat() -> None:
            self.publisher.emit({"type": protocol.HEARTBEAT, "status": self.state.value, "pid": None,
                                 "pending_events": self.publisher.pending})

        self.pump.drain_to_the_end(
            heartbeat=heartbeat, heartbeat_interval=self.launch.heartbeat_interval, give_up_after=self.settings.final_delivery_s,
            poll_interval=self.settings.poll_interval_s)

    def _sweep(self) -> list[int]:
        launch = self.launch
        swept = RankProcesses.sweep(launch.job_id, launch.attempt, launch.node_rank, self.run_dir)
        if swept:
            self.pump.supervisor_line(f"killed {len(swept)} stray process(es) of this node: {swept}")
        return swept

    def _outcome(self, exit_code: int) -> Outcome:
        node = f"node rank {self.launch.node_rank}"
        yielded = self._preemption.yielded()
        if yielded is not None:
            step = yielded.get("step")
            return Outcome(SupervisorState.STOPPED, exit_code, f"{node}: yielded for preemption" + (
                f" after its checkpoint at step {step}" if step is not None else ""), yielded=True)
        if self._preemption.stopped_for_grace:
            return Outcome(SupervisorState.STOPPED, exit_code,
                           f"{node}: stopped for preemption: did not yield within {self._preemption.grace:g} s")
        if self._stop_sent:
            return Outcome(SupervisorState.STOPPED, exit_code, f"stop requested ({signal_name(self._stop_signal)})")
        if self._lingered and not (self._stall_failure or self._watchdog_fired):
            # Every other rank of the job had exited 0: the work is done, the ranks ended were hung.
            warning = "; ".join(ended.summary() for ended in self._lingered)
            return Outcome(SupervisorState.COMPLETED, 0, f"{node}: every rank's work is done; {warning}", warning=warning)
        detail = ""
        if self._first_failure is not None:
            worker_code, local_rank = self._first_failure
            detail = (f"; first failure: global rank {self.launch.rank_start + local_rank} (local rank {local_rank}) "
                      f"{describe_exit(worker_code)}")
        if self._stall_failure:
            return Outcome(SupervisorState.FAILED, exit_code, f"{node}: {self._stall_failure}")
        if self._watchdog_fired:
            return Outcome(SupervisorState.FAILED, exit_code,
                           f"{node}: a worker failed and torchrun did not exit within {self.settings.watchdog_s:g} s; "
                           f"killed its process tree{detail}")
        if self._torchrun_cut and self._ranks_done_at is not None and self._worker_failed_at is None:
            return Outcome(SupervisorState.COMPLETED, 0, f"{node}: every rank exited 0 ({self._what} ended without "
                           "waiting for the other nodes in its exit barrier)")
        if self._torchrun_cut:
            # The exit code torchrun was about to return (any failed worker makes it exit 1).
            return Outcome(SupervisorState.FAILED, 1, f"{node}: torchrun failed, ended once its workers were gone{detail}")
        if exit_code == 0:
            return Outcome(SupervisorState.COMPLETED, 0, f"{node}: {self._what} exited with code 0")
        return Outcome(SupervisorState.FAILED, exit_code, f"{node}: {self._what} {describe_exit(exit_code)}{detail}")

    def _emit_final_state(self, outcome: Outcome, last_lines: list[LogLine]) -> None:
        final: NodeStateEvent = {"type": protocol.STATE, "status": outcome.state.value, "exit_code": outcome.exit_code,
                                 "reason": outcome.reason, "scope": "node"}
        if outcome.state is SupervisorState.FAILED:
            final["last_lines"] = last_lines
        if outcome.fatal:
            final["fatal"] = True
        elif outcome.state is SupervisorState.FAILED and (error := first_error(self.run_dir)) is not None:
            final["error"] = error
        if outcome.yielded:
            final["yielded"] = True
        if outcome.warning:
            final["warning"] = outcome.warning
        self.publisher.emit(final)
