"""The kill matrix (issue 7): every fault a team meets, injected for real mid-run into a 2-node job
on hosts that are really apart (network namespaces, see netns.py), and what must hold afterwards.

Each case starts a job with `start()`, injects its fault, and ends with `assert_sound()`, the checks
every case shares: the job ends as the case says, its final metric step is the requested one, its
events arrived once each and in order, every rank's log lines arrived (against the supervisor's own
per-rank files), and nothing of the job is left running on any host. A new case (a SIGSTOPped rank,
a preflight failure) needs nothing else:

    run = start(cluster, "my-case", steps=80)
    run.wait_checkpoint()
    run.rank_process(1).kill()
    assert_sound(run)                                  # or status="failed", steps=None, ...

The cases use the session's three hosts apart (conftest's `cluster`): two for the job and a spare.
`every_host_up` gives each case all three online, whatever the previous case left behind.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest
from websockets.exceptions import WebSocketException
from websockets.sync.client import connect

from .netns import Cluster, Host, netns_unavailable

pytestmark = pytest.mark.skipif(bool(netns_unavailable()), reason=netns_unavailable() or "available")

FINAL = {"completed", "failed", "stopped"}
STEP_SLEEP = 0.05
CHECKPOINT_EVERY = 10


@pytest.fixture(autouse=True)
def every_host_up(cluster):
    """Each case starts with every link up and every agent running and online, and no machine
    quarantined (a stall verdict of an earlier case would otherwise steer its plan)."""
    cluster.settle()


# --- the helper API ------------------------------------------------------------------------------
@dataclass
class Run:
    """One job of the matrix and what its case did to it."""

    cluster: Cluster
    job_id: int
    steps: int
    # (attempt, node_rank) of nodes whose supervisor was killed with -9: the events it had not yet
    # sent are gone with it, so their logs may end early (but never have a hole).
    cut_short: set[tuple[int, int]] = field(default_factory=set)

    @property
    def stack(self):
        return self.cluster.stack

    def job(self) -> dict[str, Any]:
        return self.stack.job(self.job_id)

    def events(self, types: str = "") -> list[dict[str, Any]]:
        return self.stack.events(self.job_id, types)

    def wait_step(self, step: int, timeout: float = 120.0) -> None:
        """Until every rank of the current attempt has reported a metric at `step` or later."""
        self._wait(lambda: self._ranks_at(step), f"no metric at step {step} on every rank", timeout)

    def _ranks_at(self, step: int) -> bool:
        job = self.job()
        world = sum(node["nproc"] for node in job["plan"]["nodes"]) if job.get("plan") else 2
        reached = {e["rank"] for e in self.events("metric")
                   if e["attempt"] == job["attempt"] and (e.get("step") or 0) >= step}
        return len(reached) >= world

    def wait_checkpoint(self, timeout: float = 120.0) -> dict[str, Any]:
        """Until a checkpoint of this job is committed; returns the newest."""
        found: list[dict[str, Any]] = []

        def committed() -> bool:
            found[:] = self.stack.api("GET", f"/api/jobs/{self.job_id}/checkpoints").json()
            return bool(found)

        assert self.stack.watch_job(self.job_id, committed, timeout, on=frozenset({"checkpoint"})), \
            f"no checkpoint committed within {timeout:.0f}s\n{self.explain()}"
        return max(found, key=lambda c: c["step"])

    def wait_final(self, timeout: float = 180.0) -> dict[str, Any]:
        job: dict[str, Any] = {}

        def ended() -> bool:
            job.update(self.job())
            return job["status"] in FINAL

        assert self.stack.watch_job(self.job_id, ended, timeout), f"the job did not end within {timeout:.0f}s\n{self.explain()}"
        return job

    def _wait(self, done: Callable[[], bool], what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            assert time.monotonic() < deadline, f"{what} within {timeout:.0f}s\n{self.explain()}"
            time.sleep(0.3)

    def node_host(self, node_rank: int) -> Host:
        """The host the current attempt placed node `node_rank` on."""
        node = next(n for n in self.job()["plan"]["nodes"] if n["node_rank"] == node_rank)
        return self.cluster.host_of(node["machine_id"])

    def rank_process(self, rank: int) -> psutil.Process:
        """The training process of global rank `rank` in the current attempt (torchrun's worker)."""
        attempt = str(self.job()["attempt"])
        for host in self.cluster.hosts:
            for proc in host.processes():
                try:
                    env = proc.environ()
                except psutil.Error:
                    continue
                if (env.get("TORCHYARD_JOB_ID") == str(self.job_id) and env.get("TORCHYARD_ATTEMPT") == attempt
                        and env.get("RANK") == str(rank)):
                    return proc
        raise AssertionError(f"no process of rank {rank} in attempt {attempt}\n{self.explain()}")

    def leftovers(self) -> list[str]:
        """What of the job still runs on any host: launched processes (they carry its id) and
        node supervisors (their command line names the job's run directory)."""
        run_dirs = f"/runs/job-{self.job_id}/"
        left = []
        for host in self.cluster.hosts:
            for proc in host.processes():
                try:
                    env, cmdline = proc.environ(), " ".join(proc.cmdline())
                except psutil.Error:
                    continue
                if env.get("TORCHYARD_JOB_ID") == str(self.job_id) or (
                        "torchyard.supervisor" in cmdline and run_dirs in cmdline):
                    left.append(f"{host.netns} pid {proc.pid}: {cmdline[:160]}")
        return left

    def explain(self) -> str:
        """What a failing assertion shows: transitions, the job's last log lines, the stack's."""
        try:
            states = "\n".join(
                f"#{e['id']} {e['ts']} {e.get('scope')} node {e.get('node_rank')} attempt {e.get('attempt')}: "
                f"{e.get('previous') or ''}->{e['status']} {(e.get('reason') or '')[:200]}"
                for e in self.events("state"))
            logs = self.stack.job_log_tail(self.job_id)
        except Exception as exc:  # the web process may be what is down
            states, logs = f"(unavailable: {exc})", ""
        return f"--- states ---\n{states}\n--- job log ---\n{logs}\n--- stack log ---\n{self.stack.log_tail(30)}"


def start(cluster: Cluster, name: str, *, steps: int, max_restarts: int = 2, heartbeat_timeout: float = 10,
          args: Iterable[str] = (), **spec: Any) -> Run:
    """Submit a 2-node job of examples/mlp_ddp.py (one process per node, a metric and a line every
    step, a checkpoint every CHECKPOINT_EVERY steps) and return its Run. `spec` adds to or replaces
    parts of the JobSpec.

    No GLOO_SOCKET_IFNAME: the supervisor must pick the interface towards the master itself."""
    body = {
        "name": name,
        "entrypoint": "examples/mlp_ddp.py",
        # A metric and a line per step and rank: events are in flight whenever a fault lands.
        "args": ["--steps", str(steps), "--step-sleep", str(STEP_SLEEP), "--report-every", "1", "--log-every", "1",
                 *args],
        "resources": {"nodes": 2, "procs_per_node": 1},
        "checkpointing": {"every_n_steps": CHECKPOINT_EVERY},
        "fault_tolerance": {"max_restarts": max_restarts, "heartbeat_timeout": heartbeat_timeout},
        **spec,
    }
    job = cluster.stack.submit(body)
    return Run(cluster=cluster, job_id=job["id"], steps=steps)


@dataclass
class Outcome:
    job: dict[str, Any]
    events: list[dict[str, Any]]

    def states(self, scope: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == "state" and e.get("scope") == scope]


def assert_sound(run: Run, *, status: str = "completed", steps: int | None = -1, timeout: float = 180.0,
                 settle: float = 30.0) -> Outcome:
    """The checks every case shares, once the job has ended:

    - it ended `status`;
    - its last metric, on every rank, is at step `steps` (default: the requested steps; None skips);
    - its event ids increase without a repeat; every supervisor's events arrived with their numbers
      (`seq`) 1, 2, ... without a hole and in order, and none twice under another key (one
      transition, one node report, one metric per rank and step);
    - every rank's log lines arrived, in order, exactly as in the per-rank files the supervisor
      tailed (torchrun's own lines against its torchrun.log too); a node in `run.cut_short` may
      miss its tail;
    - no process of the job is left on any host.

    Events and leftovers are re-checked for up to `settle` seconds: a node whose link came back
    still delivers what it buffered, and the ingest loop may be a batch behind."""
    job = run.wait_final(timeout)
    assert job["status"] == status, f"the job is {job['status']}: {job['status_reason']}\n{run.explain()}"
    deadline = time.monotonic() + settle
    while True:
        try:
            left = run.leftovers()
            assert not left, "processes of the job left:\n" + "\n".join(left)
            events = run.events()
            _check_events(run, events)
            _check_logs(run, events)
            if steps is not None:
                _check_final_step(run, job, events, run.steps if steps == -1 else steps)
            return Outcome(job=job, events=events)
        except AssertionError as exc:
            if time.monotonic() > deadline:
                raise AssertionError(f"{exc}\n{run.explain()}") from None
            time.sleep(1.0)


def _check_events(run: Run, events: list[dict[str, Any]]) -> None:
    ids = [e["id"] for e in events]
    assert ids == sorted(set(ids)), "event ids must increase with no repeat"
    assert {e["job"] for e in events} <= {run.job_id}
    # Ids are global (every job's events share one sequence), so "no gap" is per supervisor: its
    # events are numbered 1, 2, ... and all of them must be here, in the order it sent them.
    by_node: dict[int, list[int]] = defaultdict(list)
    for e in events:
        if e.get("seq") is not None:
            by_node[e["node"]].append(e["seq"])
    assert by_node, "no supervisor event at all"
    for node, seqs in by_node.items():
        assert seqs == list(range(1, len(seqs) + 1)), (
            f"node {node}: events arrived out of order or with holes: "
            f"missing {sorted(set(range(1, max(seqs) + 1)) - set(seqs))[:20]}, "
            f"repeated {[s for s, n in Counter(seqs).items() if n > 1][:20]}")
    # The same fact must not arrive twice under two keys (a second supervisor, a report replayed).
    duplicated = [key for key, n in Counter(_fact(e) for e in events).items() if key and n > 1]
    assert not duplicated, f"events duplicated: {duplicated[:10]}"


def _fact(event: dict[str, Any]) -> tuple | None:
    kind = event["type"]
    if kind == "state":
        return ("state", event.get("scope"), event.get("node"), event["attempt"], event.get("previous"), event["status"])
    if kind == "metric":
        return ("metric", event["attempt"], event["rank"], event.get("step"))
    if kind == "checkpoint":
        return ("checkpoint", event["attempt"], event["rank"], event.get("step"))
    return None  # log lines are compared with their files


def _check_final_step(run: Run, job: dict[str, Any], events: list[dict[str, Any]], steps: int) -> None:
    metrics = [e for e in events if e["type"] == "metric"]
    last: dict[int, int] = {}
    for e in metrics:
        if e["attempt"] == job["attempt"]:
            last[e["rank"]] = e["step"]
    assert last and set(last.values()) == {steps} and len(last) == 2, f"last metric step per rank: {last}, wanted {steps}"
    assert max(e["step"] for e in metrics) == steps


def node_runs(run: Run) -> dict[tuple[int, int], Path]:
    """(attempt, node_rank) -> the run directory of every node this job launched, on whichever host."""
    found: dict[tuple[int, int], Path] = {}
    for host in run.cluster.hosts:
        for launch in (host.work_dir / "runs" / f"job-{run.job_id}").glob("attempt-*/node-*/launch.json"):
            key = (int(launch.parent.parent.name.split("-")[1]), int(launch.parent.name.split("-")[1]))
            assert key not in found, f"attempt {key[0]} node {key[1]} ran on two hosts: {found[key]} and {launch.parent}"
            found[key] = launch.parent
    return found


def _file_lines(path: Path) -> list[str]:
    # As the supervisor's tail reads them: split on \n, the unterminated last line included.
    lines = path.read_bytes().decode("utf-8", errors="replace").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.rstrip("\r") for line in lines]


def _difference(got: list[str], lines: list[str]) -> str:
    at = next((i for i, (a, b) in enumerate(zip(got, lines, strict=False)) if a != b), min(len(got), len(lines)))
    return f"first difference at line {at}: arrived {got[at:at + 2]!r}, file {lines[at:at + 2]!r}"


def _check_logs(run: Run, events: list[dict[str, Any]]) -> None:
    arrived: dict[tuple, list[str]] = defaultdict(list)
    for e in events:
        if e["type"] != "log":
            continue
        if e.get("source") == "worker":
            arrived[("worker", e["attempt"], e["rank"], e["stream"])].append(e["line"])
        elif e.get("source") == "torchrun":
            arrived[("torchrun", e["attempt"], e["node_rank"])].append(e["line"])
    written: dict[tuple, list[str]] = {}
    cut: set[tuple] = set()
    runs = node_runs(run)
    assert runs, "no run directory of the job on any host"
    for (attempt, node_rank), run_dir in runs.items():
        launch = json.loads((run_dir / "launch.json").read_text())
        short = (attempt, node_rank) in run.cut_short
        # torchrun --log-dir: <rdzv id>_<random>/attempt_0/<local rank>/{stdout,stderr}.log
        for path in sorted((run_dir / "torchrun").glob("*/attempt_*/*/std*.log")):
            rank = launch["node_rank"] * launch["nproc_per_node"] + int(path.parent.name)  # NodeLaunch.rank_start
            key = ("worker", attempt, rank, path.stem)
            written[key] = _file_lines(path)
            if short:
                cut.add(key)
        if (run_dir / "torchrun.log").exists():
            key = ("torchrun", attempt, node_rank)
            written[key] = _file_lines(run_dir / "torchrun.log")
            if short:
                cut.add(key)
    # Lines of a rank whose file is not where the supervisor's tail reads would be a phantom (and
    # would mean this check compares nothing): every line that arrived must have its file.
    unknown = set(arrived) - set(written)
    assert not unknown, f"log lines of ranks without files: {sorted(unknown)}"
    for key, lines in sorted(written.items()):
        got = arrived.get(key, [])
        if key in cut:
            assert got == lines[:len(got)], f"{key}: the lines that arrived are not the file's first {len(got)}"
        else:
            assert got == lines, f"{key}: {len(got)} lines arrived, the file has {len(lines)}; {_difference(got, lines)}"


# --- the cases -----------------------------------------------------------------------------------
def test_kill_9_of_a_rank_resumes_from_the_checkpoint(cluster):
    run = start(cluster, "kill-rank", steps=80)
    saved = run.wait_checkpoint()
    run.rank_process(1).kill()
    outcome = assert_sound(run)
    assert outcome.job["attempt"] == 1, run.explain()
    failed = [e for e in outcome.states("node") if e["status"] == "failed" and "previous" not in e]
    assert failed and failed[0]["attempt"] == 0, run.explain()
    # Both ranks of attempt 1 start from one checkpoint, at least the one seen before the kill.
    resumed = {int(m.group(1)) for e in outcome.events if e["type"] == "log" and e["attempt"] == 1
               if (m := re.search(r"resumed from checkpoint at step (\d+)", e["line"]))}
    assert len(resumed) == 1 and resumed.pop() >= saved["step"], run.explain()


def test_kill_9_of_an_agent_alone_lets_training_go_on(cluster):
    run = start(cluster, "kill-agent", steps=300)
    run.wait_step(10)
    host = run.node_host(1)
    host.kill_agent()
    # Its machine goes offline (no agent heartbeats) while its node trains on: supervisors do not
    # need their agent, and an offline machine is not a lost node.
    cluster.wait_machine(host, {"offline"}, timeout=30)
    assert run.job()["status"] == "running", run.explain()
    outcome = assert_sound(run)
    assert outcome.job["attempt"] == 0, run.explain()
    assert not {"lost", "failed"} & {e["status"] for e in outcome.states("node")}, run.explain()
    host.start_agent()
    cluster.wait_machine(host, {"online"})


def test_kill_9_of_a_whole_host_moves_the_job_to_the_spare(cluster):
    run = start(cluster, "kill-host", steps=100, heartbeat_timeout=6)
    run.wait_checkpoint()
    used = {node["machine_id"] for node in run.job()["plan"]["nodes"]}
    victim = run.node_host(1)
    victim.kill_everything()  # agent, supervisor, torchrun and the rank, all with SIGKILL
    run.cut_short.add((0, 1))
    outcome = assert_sound(run)
    spare = next(h for h in cluster.hosts if h.machine_id not in used)
    last = {node["machine_id"] for node in outcome.job["plan"]["nodes"]}
    assert outcome.job["attempt"] >= 1 and last == (used - {victim.machine_id}) | {spare.machine_id}, run.explain()


def test_a_link_down_for_3_s_is_a_blip_and_the_job_goes_on(cluster):
    run = start(cluster, "blip", steps=120, max_restarts=1)
    run.wait_step(20)
    victim = run.node_host(1)
    victim.link_down()
    try:
        time.sleep(3)  # under heartbeat_timeout and the machine's offline threshold
    finally:
        victim.link_up()
    # Nothing happened: no node lost, no restart; what the supervisor buffered meanwhile arrived.
    outcome = assert_sound(run)
    assert outcome.job["attempt"] == 0, run.explain()
    assert not {"lost", "failed"} & {e["status"] for e in outcome.states("node")}, run.explain()


def test_a_host_whose_link_goes_down_for_good_is_replaced_by_the_spare(cluster):
    run = start(cluster, "partitioned", steps=150, heartbeat_timeout=6)
    run.wait_checkpoint()
    used = {node["machine_id"] for node in run.job()["plan"]["nodes"]}
    # The worker's host: cut off, its rank's collectives with the master hang rather than fail, so
    # only the control plane's heartbeat timeout can notice (the node, then its machine, go silent).
    victim = run.node_host(1)
    assert victim.can_reach(cluster.gateway, cluster.web_port)
    victim.link_down()
    try:
        assert not victim.can_reach(cluster.gateway, cluster.web_port, timeout=1.0)
        run.wait_final()
    finally:
        victim.link_up()
    # Back on the network, the cut-off node learns it was stopped and delivers what it buffered.
    outcome = assert_sound(run, settle=60)
    # Recovered onto the master's host and the spare, never back onto the partitioned one.
    spare = next(h for h in cluster.hosts if h.machine_id not in used)
    last = {node["machine_id"] for node in outcome.job["plan"]["nodes"]}
    assert outcome.job["attempt"] >= 1 and last == (used - {victim.machine_id}) | {spare.machine_id}, run.explain()
    lost = [e for e in outcome.states("node") if e["status"] == "lost"]
    assert [(e["node_rank"], e["attempt"]) for e in lost[:1]] == [(1, 0)], run.explain()


def test_kill_9_of_the_controller_is_restarted_and_recovers_a_rank_killed_meanwhile(cluster):
    run = start(cluster, "kill-controller", steps=80)
    run.wait_checkpoint()
    rank = run.rank_process(1)
    # While the controller is down a rank dies: its successor must pick up the recovery.
    cluster.stack.kill_child("controller", meanwhile=rank.kill)
    outcome = assert_sound(run)
    assert outcome.job["attempt"] == 1, run.explain()


def test_kill_9_of_the_ingest_loop_loses_and_repeats_no_event(cluster):
    run = start(cluster, "kill-ingest", steps=120)
    run.wait_step(20)
    cluster.stack.kill_child("ingest")
    outcome = assert_sound(run)
    assert outcome.job["attempt"] == 0, run.explain()


class StreamFollower(threading.Thread):
    """A client of /api/jobs/{id}/stream that reconnects with its cursor (`?after=`), as the
    dashboard and `torchyard logs --follow` do; it keeps every event it was sent."""

    def __init__(self, run: Run) -> None:
        super().__init__(daemon=True)
        self.run_ = run
        self.events: list[dict[str, Any]] = []
        self.connections = 0
        self.cursor = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        stack = self.run_.stack
        while not self.stopping.is_set():
            url = stack.ws_url(f"/api/jobs/{self.run_.job_id}/stream?after={self.cursor}")
            try:
                with connect(url, additional_headers={"Authorization": f"Token {stack.token}"}, open_timeout=5) as ws:
                    self.connections += 1
                    while not self.stopping.is_set():
                        try:
                            message = json.loads(ws.recv(timeout=0.5))
                        except TimeoutError:
                            continue
                        if message["type"] == "events" and message["events"]:
                            self.events.extend(message["events"])
                            self.cursor = message["events"][-1]["id"]
            except (OSError, WebSocketException):
                time.sleep(0.3)  # the web process is down: try again with the cursor

    def finish(self, last_id: int, timeout: float = 30.0) -> None:
        """Once it has been sent `last_id`, stop it."""
        deadline = time.monotonic() + timeout
        while self.cursor < last_id and time.monotonic() < deadline:
            time.sleep(0.2)
        self.stopping.set()
        self.join(timeout=10)


def test_kill_9_of_the_web_process_and_a_stream_client_resumes_from_its_cursor(cluster):
    run = start(cluster, "kill-web", steps=120)
    follower = StreamFollower(run)
    follower.start()
    try:
        run.wait_step(20)
        cluster.stack.kill_child("web")
        outcome = assert_sound(run)
        last = outcome.events[-1]["id"]
        follower.finish(last)
    finally:
        follower.stopping.set()
    assert follower.connections >= 2, "the stream was never cut"
    # Every event exactly once, in order, across the reconnection.
    streamed = [e["id"] for e in follower.events if e["id"] <= last]
    assert streamed == [e["id"] for e in outcome.events], (
        f"streamed {len(streamed)} events ({len(set(streamed))} distinct), the job has {len(outcome.events)}")
    assert outcome.job["attempt"] == 0, run.explain()


def test_a_redis_restart_loses_no_event_and_the_job_goes_on(cluster):
    run = start(cluster, "redis-restart", steps=150)
    run.wait_step(20)
    cluster.redis.restart(down_s=2.0)
    outcome = assert_sound(run)
    assert outcome.job["attempt"] == 0, run.explain()


def test_a_job_whose_every_attempt_fails_ends_failed_with_each_reason_kept(cluster):
    # --report-every 0: every rank raises ZeroDivisionError at its first step, in every attempt. The
    # same error is retried at most once by default (retry_same_error: 1; test_job_exits.py has that
    # case): here it may be, twice, so that every restart of the budget is spent and its reason kept.
    run = start(cluster, "always-fails", steps=40, args=["--report-every", "0"],
                fault_tolerance={"max_restarts": 2, "retry_same_error": 2, "heartbeat_timeout": 10})
    outcome = assert_sound(run, status="failed", steps=None)
    assert outcome.job["attempt"] == 2 and outcome.job["restarts"] == 2, run.explain()
    reasons = {e["attempt"]: e.get("reason") or "" for e in outcome.states("job")
               if e["status"] in ("recovering", "failed")}
    assert sorted(reasons) == [0, 1, 2], run.explain()
    for attempt, reason in reasons.items():
        assert "ZeroDivisionError" in reason, f"attempt {attempt}: {reason}"
    assert "ZeroDivisionError" in outcome.job["status_reason"]


def test_a_sigstopped_rank_0_is_named_under_auto_its_machine_quarantined_and_the_job_trains_elsewhere(cluster):
    """SIGSTOP of rank 0, on the master's node, under the default `stall_timeout: auto`: the deadline
    comes from the job's own step times (0.05 s: the 15 s floor), the verdict names rank 0 and its
    machine, the machine is quarantined, and the next attempt is planned on the two other hosts. The
    operator's release brings the machine back."""
    run = start(cluster, "sigstop", steps=80, fault_tolerance={
        "max_restarts": 2, "heartbeat_timeout": 10, "on_stall": "recover"})
    run.wait_checkpoint()
    first = {n["node_rank"]: n["machine"]["id"] for n in run.job()["nodes"] if n["attempt"] == 0}
    victim = cluster.host_of(first[0])
    run.rank_process(0).suspend()  # SIGSTOP: alive, heart-beating, and going nowhere
    outcome = assert_sound(run)
    assert outcome.job["attempt"] == 1, run.explain()
    stalled = [e for e in outcome.events if e["type"] == "stalled" and e["attempt"] == 0]
    stopped = next((e for e in stalled if e["rank"] == 0), None)
    assert stopped is not None, run.explain()
    # Named: the rank, where it runs, what it last printed, and its Python stack read from outside.
    assert stopped["process_state"] == "stopped" and stopped["node_rank"] == 0 and stopped["last_line"], stopped
    assert "mlp_ddp.py" in stopped["stack"] and "train" in stopped["stack"], stopped["stack"]
    # The deadline came from the job's step times, and the evidence says so.
    assert stopped["timeout"] == 15 and stopped["stalled_for"] >= 15, stopped
    assert stopped["timeout_basis"].startswith("auto: 2 x the p95 step time ("), stopped["timeout_basis"]
    failed = next(e for e in outcome.states("node") if e["status"] == "failed" and e["attempt"] == 0)
    assert "stalled: no new step for" in failed["reason"] and "on_stall: recover" in failed["reason"], failed
    # Quarantined, and the next attempt went to the two other hosts.
    machine = cluster.machine(victim)
    assert machine["status"] == "quarantined" and machine["quarantine_job"] == run.job_id, machine
    assert machine["quarantine_reason"].startswith(f"rank 0 on machine {victim.machine_name} (process stopped"), machine
    again = {n["machine"]["id"] for n in outcome.job["nodes"] if n["attempt"] == 1}
    assert len(again) == 2 and victim.machine_id not in again, outcome.job["nodes"]
    released = cluster.stack.api("PATCH", f"/api/machines/{victim.machine_id}", json={"quarantined": False})
    assert released.ok and released.json()["status"] == "online", released.text


@dataclass
class Pulses:
    """SIGSTOP and SIGCONT in turn on one process (stopped `stopped_s` of every `period_s`): a rank
    that is alive and steps, but slowly, as one on a throttled or overloaded machine."""

    process: psutil.Process
    stopped_s: float = 0.3
    period_s: float = 0.4
    _done: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> Pulses:
        threading.Thread(target=self._run, daemon=True).start()
        return self

    def _run(self) -> None:
        try:
            while not self._done.is_set():
                self.process.suspend()
                self._done.wait(self.stopped_s)
                self.process.resume()
                self._done.wait(self.period_s - self.stopped_s)
        except psutil.Error:
            pass  # the rank ended (its attempt was stopped): nothing left to pulse

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        with contextlib.suppress(psutil.Error):
            self.process.resume()


def test_a_rank_slowed_by_sigstop_pulses_is_named_a_straggler_and_moved_onto_the_spare_at_the_next_checkpoint(cluster):
    """Rank 1 stopped 75 % of the time keeps stepping, the whole job at its pace. Its own step time
    (the part not spent waiting on rank 0) against rank 0's names it a straggler, the evidence says
    its process was stopped, and under `stragglers: replace` the next committed checkpoint ends the
    attempt without counting a restart: attempt 1 runs node 1 on the hot spare and completes."""
    run = start(cluster, "straggler", steps=160, resources={"nodes": 2, "procs_per_node": 1, "spares": 1},
                fault_tolerance={"max_restarts": 2, "heartbeat_timeout": 10, "stragglers": "replace",
                                 "straggler_window": 6})
    run.wait_step(5)
    plan = run.job()["plan"]
    slow_machine = run.node_host(1).machine_name
    spare = plan["spares"][0]["machine_name"]
    with Pulses(run.rank_process(1)):
        assert cluster.stack.watch_job(run.job_id, lambda: run.job()["attempt"] == 1, 120), run.explain()
    outcome = assert_sound(run)
    [named] = [e for e in outcome.events if e["type"] == "straggler" and e["state"] == "named"]
    assert (named["rank"], named["attempt"], named["machine"], named["policy"]) == (1, 0, slow_machine, "replace"), named
    assert "its process was stopped" in named["evidence"] and named["ratio"] > 1.3, named
    replacing = next(e for e in outcome.states("job") if e["status"] == "recovering")
    assert replacing["reason"].startswith(f"replacing rank 1 on machine {slow_machine}"), replacing
    assert replacing["reason"].endswith("at its committed checkpoint"), replacing
    moved = {n["node_rank"]: n["machine"]["name"] for n in outcome.job["nodes"] if n["attempt"] == 1}
    assert moved == {0: run.node_host(0).machine_name, 1: spare}, outcome.job["nodes"]
    assert outcome.job["restarts"] == 0, outcome.job
    relaunched = next(e for e in outcome.states("job") if e["status"] == "dispatching" and e["attempt"] == 1)
    assert relaunched["reason"].startswith(f"hot spare {spare} takes node 1's place ({slow_machine} straggler: rank 1"), \
        relaunched


def test_a_host_stopped_whole_is_named_by_its_silence_quarantined_and_the_job_trains_on_the_spare(cluster):
    """Every process of node 1's host SIGSTOPped (agent, supervisor, rank): links up, nothing dead,
    nothing moves. Rank 0 stalls in the collective; with the heartbeat timeout (20 s) above the
    stall deadline (auto: 15 s) the verdict comes first and names the silent host by its machine,
    which is quarantined (on_stall: recover); the job trains again on its hot spare. The host
    continued, its machine stays quarantined until released."""
    run = start(cluster, "host-stop", steps=120, resources={"nodes": 2, "procs_per_node": 1, "spares": 1},
                fault_tolerance={"max_restarts": 2, "heartbeat_timeout": 20, "on_stall": "recover"})
    run.wait_checkpoint()
    victim = run.node_host(1)
    spare = run.job()["plan"]["spares"][0]["machine_name"]
    with victim.frozen():
        assert cluster.stack.watch_job(run.job_id, lambda: run.job()["attempt"] == 1, 120), run.explain()
        machine = cluster.machine(victim)
    outcome = assert_sound(run)
    # Its agent frozen too: offline by now, and quarantined all the same.
    assert machine["quarantined_at"] and machine["quarantine_job"] == run.job_id, machine
    assert machine["quarantine_reason"].startswith(f"machine {victim.machine_name} (node 1, rank 1: no heartbeat for"), \
        machine
    stall = [e for e in outcome.events if e["type"] == "stalled" and e["attempt"] == 0]
    # Rank 0 stalled waiting for it (the frozen node, once thawed, may report its own rank's long
    # silence too: its supervisor saw no step for the whole freeze).
    assert any(e["node_rank"] == 0 for e in stall), stall
    moved = {n["node_rank"]: n["machine"]["name"] for n in outcome.job["nodes"] if n["attempt"] == 1}
    assert moved == {0: run.node_host(0).machine_name, 1: spare}, outcome.job["nodes"]
    # Thawed, its agent reports again: its machine comes back quarantined, out until an operator (or
    # its health check, after the probation) releases it.
    assert cluster.stack.watch_job(run.job_id, lambda: cluster.machine(victim)["status"] == "quarantined", 60), \
        cluster.machine(victim)


def test_a_master_the_other_node_cannot_reach_fails_at_preflight_naming_address_and_cause(cluster):
    master, other = cluster.hosts[0], cluster.hosts[1]
    # A wrong registered address: inside the test's own subnet, held by no host (nothing answers ARP).
    wrong = master.address.rsplit(".", 1)[0] + ".250"
    assert cluster.stack.api("PATCH", f"/api/machines/{master.machine_id}", json={"host": wrong}).status_code == 200
    try:
        run = start(cluster, "unreachable-master", steps=20, max_restarts=0,
                    placement={"policy": "pack", "machines": [master.machine_name, other.machine_name]})
        outcome = assert_sound(run, status="failed", steps=None, timeout=60)
    finally:
        cluster.stack.api("PATCH", f"/api/machines/{master.machine_id}", json={"host": master.address})
    port = outcome.job["plan"]["master_port"]
    reason = outcome.job["status_reason"]
    assert f"node 1 ({other.machine_name})" in reason, reason
    # The kernel's word for it: "no route to host" once ARP gives up, or a timeout where it stays silent.
    assert re.search(rf"cannot reach the master at {re.escape(wrong)}:{port}: (no route to host|timed out)", reason), reason
    # Failed by the preflight, not by a rendezvous timeout minutes later: no rank ever started (how
    # soon is `make bench`'s business, not a test's).
    assert not [e for e in outcome.events if e["type"] == "metric"]
    [failed_check] = [e for e in outcome.events if e["type"] == "preflight" and not e["ok"]]
    assert failed_check["node_rank"] == 1 and failed_check["interface"] == "eth0", failed_check

