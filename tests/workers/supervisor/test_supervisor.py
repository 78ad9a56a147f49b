"""The node supervisor end to end: real torchrun, real gloo, real Redis, supervisors as processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from supervisor_support import (
    final_states,
    free_port,
    has_final_state,
    has_state,
    job_processes,
    listening_on,
    states,
    wait_until_no_job_processes,
)
from torchyard import protocol
from torchyard.node.proctree import find_job_processes
from torchyard.supervisor.argv import PACKAGE_PARENT

pytestmark = pytest.mark.timeout(90)


def result_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "result.json").read_text())


def wait_exit(proc: subprocess.Popen, timeout: float = 40.0) -> int:
    return proc.wait(timeout=timeout)


def test_two_nodes_train_and_complete(supervisors, job_launch):
    port = free_port()
    nodes = [
        job_launch(
            node_rank=rank,
            nnodes=2,
            nproc_per_node=2,
            master_port=port,
            config={"hyperparameters": {"lr": 1}},
        )
        for rank in (0, 1)
    ]
    started = [supervisors.start(node) for node in nodes]
    assert [wait_exit(proc) for proc, _ in started] == [0, 0]
    job = nodes[0].job_id
    events = supervisors.events(job)

    for node_rank in (0, 1):
        node_events = [e for e in events if e["node_rank"] == node_rank]
        assert [e["status"] for e in states(events, node_rank)] == ["running", "completed"]
        # Persisted events are numbered 1, 2, 3 ... without a gap; heartbeats carry no number.
        seqs = [e["seq"] for e in node_events if e["type"] != protocol.HEARTBEAT]
        assert seqs == list(range(1, len(seqs) + 1))
        assert all(e["seq"] is None for e in node_events if e["type"] == protocol.HEARTBEAT)
        assert {e["node"] for e in node_events} == {nodes[node_rank].node_id}
        assert {e["attempt"] for e in node_events} == {1}
    logs = [e for e in events if e["type"] == protocol.LOG and e["source"] == "worker"]
    for rank in range(4):
        assert any(
            e["rank"] == rank and e["stream"] == "stdout" and e["line"] == f"hello from rank {rank} of 4"
            for e in logs
        )
        assert any(
            e["rank"] == rank and e["stream"] == "stderr" and e["line"] == f"rank {rank} stderr line"
            for e in logs
        )
        assert any(e["rank"] == rank and e["line"] == f"rank {rank} sum 6" for e in logs)
    metrics = sorted((e["rank"], e["step"], e["loss"]) for e in events if e["type"] == protocol.METRIC)
    assert metrics == [(0, 1, 0.5), (1, 1, 1.5), (2, 1, 2.5), (3, 1, 3.5)]
    # Preflight before torchrun: node 1 reached the master's port, and the master heard node 1.
    master, other = (next(e for e in events if e["type"] == protocol.PREFLIGHT and e["node_rank"] == r) for r in (0, 1))
    assert master["ok"] and master["role"] == "master" and list(master["peers"]) == ["1"]
    assert other["ok"] and other["role"] == "node" and other["master"] == f"127.0.0.1:{port}"
    assert other["interface"] == "lo" and master["torch"] == other["torch"]
    first_running = min(i for i, e in enumerate(events) if e["type"] == protocol.STATE and e["node_rank"] == 1)
    assert events.index(other) < first_running
    assert all(e["node_rank"] == e["rank"] // 2 for e in events if e["type"] == protocol.METRIC)

    for _proc, run_dir in started:
        result = result_of(run_dir)
        assert result["state"] == "completed" and result["exit_code"] == 0
        assert result["final_state_delivered"] is True
        assert result["torchrun_started_at"] <= result["ended_at"]
        assert json.loads((run_dir / "config.json").read_text()) == {"hyperparameters": {"lr": 1}}
        assert not (run_dir / "supervisor.pid").exists()
        assert not (run_dir / "events.sock").exists()
    assert job_processes(job) == []


def test_a_failing_rank_fails_its_node_and_leaves_no_process(supervisors, job_launch):
    port = free_port()
    nodes = [
        job_launch(
            node_rank=rank,
            nnodes=2,
            master_port=port,
            entrypoint="scripts/fail_one_rank.py",
            env={"FAIL_RANK": "1"},
        )
        for rank in (0, 1)
    ]
    (proc0, run0), (proc1, run1) = [supervisors.start(node) for node in nodes]
    job = nodes[0].job_id
    supervisors.wait_for(job, has_final_state(1), timeout=40)
    failed = final_states(supervisors.events(job), 1)
    assert len(failed) == 1
    failed = failed[0]
    assert failed["status"] == "failed"
    assert failed["exit_code"] == 1  # torchrun's; the worker's own code is in the reason
    assert "node rank 1" in failed["reason"]
    assert "global rank 1 (local rank 0) exited with code 3" in failed["reason"]
    # Reported as soon as torchrun's workers were gone, not after its own second-long teardown.
    assert "torchrun failed, ended once its workers were gone" in failed["reason"]
    assert {"rank": 1, "stream": "stderr", "line": "rank 1 giving up"} in failed["last_lines"]
    assert wait_exit(proc1) == 1
    assert result_of(run1)["state"] == "failed"

    # Node 0 sees its peer vanish and fails by itself; the controller would stop it otherwise.
    try:
        wait_exit(proc0, timeout=15)
    except subprocess.TimeoutExpired:
        proc0.send_signal(signal.SIGTERM)
        wait_exit(proc0, timeout=15)
    final0 = final_states(supervisors.events(job), 0)
    assert len(final0) == 1 and final0[0]["status"] in ("failed", "stopped")
    assert wait_until_no_job_processes(job) == []


def test_sigterm_stops_a_running_node_and_its_whole_tree(supervisors, job_launch):
    node = job_launch(entrypoint="scripts/sleeper.py", nproc_per_node=2, master_port=free_port())
    proc, run_dir = supervisors.start(node)
    events = supervisors.wait_for(
        node.job_id,
        lambda events: any(e["type"] == "log" and e["line"] == "step 2" for e in events),
        timeout=30,
    )
    torchrun_pid = states(events, 0)[0]["pid"]
    workers = [p for p in job_processes(node.job_id) if p.pid != torchrun_pid]
    assert len(workers) == 2
    assert int((run_dir / "supervisor.pid").read_text()) == proc.pid

    proc.send_signal(signal.SIGTERM)
    assert wait_exit(proc, timeout=15) == 143  # torchrun needs ~1-2 s; SIGKILL comes after 5 s at the latest
    assert (
        not psutil.pid_exists(torchrun_pid) or psutil.Process(torchrun_pid).status() == psutil.STATUS_ZOMBIE
    )
    assert job_processes(node.job_id) == []
    final = final_states(supervisors.events(node.job_id), 0)
    assert [e["status"] for e in final] == ["stopped"]
    assert "SIGTERM" in final[0]["reason"]
    assert result_of(run_dir)["state"] == "stopped"
    events = supervisors.events(node.job_id)
    assert any(e["type"] == protocol.HEARTBEAT for e in events)
    resource = [e for e in events if e["type"] == protocol.RESOURCE]
    # torchrun and both workers, while they ran
    assert max(e["processes"] for e in resource) == 3 and max(e["rss_mb"] for e in resource) > 0


FLOOD = """
import os, sys
rank = int(os.environ["RANK"])
write = sys.stdout.write
for i in range(60_000):
    write(f"r{rank} {i}\\n")
"""


def test_ranks_that_print_far_more_than_the_buffer_holds_lose_no_line(supervisors, job_launch, code_root):
    # 120,000 lines at once, and the ranks gone before most are read: the files hold them until the
    # publisher has room (it holds 50,000 events at most, and used to shed lines beyond that).
    (code_root / "scripts" / "flood.py").write_text(FLOOD)
    node = job_launch(entrypoint="scripts/flood.py", nproc_per_node=2, master_port=free_port())
    proc, run_dir = supervisors.start(node)
    assert wait_exit(proc, timeout=80) == 0
    assert result_of(run_dir)["events_dropped"] == {}
    events = supervisors.events(node.job_id)
    lines = [e["line"] for e in events if e["type"] == protocol.LOG and e.get("source") == "worker"]
    assert sorted(lines) == sorted(f"r{rank} {i}" for rank in range(2) for i in range(60_000))
    assert [e["status"] for e in final_states(events, 0)] == ["completed"]


def test_it_refuses_an_entrypoint_outside_the_code_root(supervisors, job_launch):
    node = job_launch(entrypoint="../../etc/passwd")
    proc, run_dir = supervisors.start(node)
    assert wait_exit(proc, timeout=15) == 1
    events = supervisors.events(node.job_id)
    assert [e["status"] for e in states(events, 0)] == ["failed"]
    assert "'..'" in events[-1]["reason"] and "torchrun not started" in events[-1]["reason"]
    assert not (run_dir / "torchrun.log").exists()
    assert result_of(run_dir)["torchrun_pid"] is None


def test_a_busy_master_port_fails_node_zero_at_once(supervisors, job_launch):
    port = free_port()
    with listening_on(port):
        node = job_launch(master_port=port)
        proc, run_dir = supervisors.start(node)
        assert wait_exit(proc, timeout=15) == 1
    final = final_states(supervisors.events(node.job_id), 0)
    assert [(e["status"], e["reason"]) for e in final] == [
        ("failed", f"node rank 0: master port {port} in use on this host (address already in use); torchrun not started")]
    assert not (run_dir / "torchrun.log").exists()


def test_workers_orphaned_by_a_killed_torchrun_are_swept(supervisors, job_launch):
    node = job_launch(entrypoint="scripts/sleeper.py", nproc_per_node=2, master_port=free_port())
    # Too long for an AF_UNIX path inside it: the SDK socket moves to /tmp, and is removed there too.
    proc, run_dir = supervisors.start(node, run_dir_name="run-with-a-very-long-name-" + "x" * 80)
    events = supervisors.wait_for(
        node.job_id,
        lambda events: sum(e["type"] == "log" and e["line"] == "step 1" for e in events) == 2,
        timeout=30,
    )
    torchrun_pid = states(events, 0)[0]["pid"]
    workers = [p for p in job_processes(node.job_id) if p.pid != torchrun_pid]
    assert len(workers) == 2
    sdk_socket = Path(workers[0].environ()[protocol.ENV_EVENT_SOCKET])
    assert sdk_socket.parent == Path("/tmp") and sdk_socket.is_socket()

    psutil.Process(torchrun_pid).kill()  # its workers, in sessions of their own, run on as orphans
    assert wait_exit(proc, timeout=15) == 1
    final = final_states(supervisors.events(node.job_id), 0)
    assert [e["status"] for e in final] == ["failed"]
    assert final[0]["exit_code"] == -9 and "torchrun was killed by SIGKILL" in final[0]["reason"]
    assert sorted(result_of(run_dir)["swept_pids"]) == sorted(p.pid for p in workers)
    assert job_processes(node.job_id) == []
    assert not sdk_socket.exists()


def test_the_watchdog_ends_a_torchrun_that_outlives_a_failed_worker(supervisors, job_launch):
    node = job_launch(entrypoint="scripts/stubborn.py", nproc_per_node=2, master_port=free_port())
    proc, run_dir = supervisors.start(node, env={"TORCHYARD_SUPERVISOR_WATCHDOG_S": "2"})
    supervisors.wait_for(node.job_id, has_state(0, "running"), timeout=15)
    assert wait_exit(proc, timeout=25) == 1
    final = final_states(supervisors.events(node.job_id), 0)
    assert [e["status"] for e in final] == ["failed"]
    assert "did not exit within 2 s" in final[0]["reason"]
    assert {"rank": 0, "stream": "stderr", "line": "rank 0 failing"} in final[0]["last_lines"]
    assert job_processes(node.job_id) == []


def test_a_supervisor_killed_outright_takes_its_torchrun_and_workers_down(supervisors, job_launch):
    node = job_launch(entrypoint="scripts/sleeper.py", nproc_per_node=2, master_port=free_port())
    proc, _run_dir = supervisors.start(node)
    supervisors.wait_for(
        node.job_id,
        lambda events: sum(e["type"] == "log" and e["line"] == "step 1" for e in events) == 2,
        timeout=30,
    )
    assert len(job_processes(node.job_id)) == 3

    proc.kill()  # no handler runs: torchrun's parent-death signal has to do it
    proc.wait()
    assert wait_until_no_job_processes(node.job_id, timeout=15) == []


def test_a_run_dir_without_a_launch_fails_with_a_result_file(tmp_path: Path):
    run_dir = tmp_path / "empty-run"
    run_dir.mkdir()
    env = {**os.environ, "PYTHONPATH": str(PACKAGE_PARENT)}
    done = subprocess.run(
        [sys.executable, "-m", "torchyard.supervisor", str(run_dir)], env=env, capture_output=True, timeout=30
    )
    assert done.returncode == 2
    result = result_of(run_dir)
    assert result["state"] == "failed" and "launch.json" in result["reason"]


def test_a_rank_that_has_ended_is_not_taken_for_a_stalled_one(supervisors, job_launch):
    node = job_launch(entrypoint="scripts/finishes_first.py", nproc_per_node=2, master_port=free_port(),
                       stall_timeout=2.0, on_stall="recover")
    proc, _ = supervisors.start(node)
    assert wait_exit(proc) == 0
    events = supervisors.events(node.job_id)
    assert not [e for e in events if e["type"] == protocol.STALLED]
    [final] = final_states(events, 0)
    assert final["status"] == "completed", final


@pytest.mark.parametrize("on_stall", ["report", "recover"])
def test_a_stopped_rank_is_reported_stalled_with_its_stack(supervisors, job_launch, on_stall):
    node = job_launch(entrypoint="scripts/stalls.py", nproc_per_node=2, master_port=free_port(),
                       stall_timeout=2.0, on_stall=on_stall)
    proc, run_dir = supervisors.start(node)
    deadline = time.monotonic() + 40
    while not [e for e in supervisors.events(node.job_id) if e["type"] == protocol.STALLED]:
        # Under `recover` the supervisor may publish the stall and exit between two reads: read again.
        ended = proc.poll() is not None
        if ended and [e for e in supervisors.events(node.job_id) if e["type"] == protocol.STALLED]:
            break
        assert time.monotonic() < deadline and not ended, supervisors.events(node.job_id)[-5:]
        time.sleep(0.2)
    [stalled] = [e for e in supervisors.events(node.job_id) if e["type"] == protocol.STALLED]
    assert (stalled["rank"], stalled["step"], stalled["process_state"]) == (1, 5, "stopped")
    assert stalled["stalled_for"] >= 2.0 and stalled["timeout"] == 2.0
    assert stalled["last_line"] == "rank 1 about to hang"
    assert "stalls.py" in stalled["stack"] and "train_step" not in stalled["stack"], stalled["stack"]
    if on_stall == "report":
        assert proc.poll() is None  # reported, nothing else: rank 0 trains on
        proc.send_signal(signal.SIGTERM)
        assert wait_exit(proc) == 143
        return
    assert wait_exit(proc) == 1
    [final] = final_states(supervisors.events(node.job_id), 0)
    assert final["status"] == "failed"
    assert "global rank 1 stalled: no new step for" in final["reason"] and "(its process is stopped)" in final["reason"]
    assert "on_stall: recover" in final["reason"]
    assert not find_job_processes(node.job_id)


def test_ranks_that_only_wait_on_peers_leave_the_culprits_node_a_grace_then_recover(supervisors, job_launch):
    # No rank here holds the others (on another node one would end the attempt first and be named):
    # under on_stall: recover the node waits its grace, then ends as failed all the same.
    node = job_launch(entrypoint="scripts/waits_on_peers.py", nproc_per_node=2, master_port=free_port(),
                       stall_timeout=2.0, on_stall="recover")
    proc, _ = supervisors.start(node, env={"TORCHYARD_SUPERVISOR_VICTIM_GRACE_S": "2"})
    assert wait_exit(proc, timeout=60) == 1
    events = supervisors.events(node.job_id)
    stalled = [e for e in events if e["type"] == protocol.STALLED]
    assert sorted(e["rank"] for e in stalled) == [0, 1]
    assert all("torch/distributed/" in (e["waits_in"] or "") for e in stalled), stalled
    lines = [e["line"] for e in events if e["type"] == protocol.LOG]
    assert any("wait on a peer: the node holding them has 2 s to end the attempt" in line for line in lines), lines[-10:]
    [final] = final_states(events, 0)
    assert final["status"] == "failed" and "on_stall: recover" in final["reason"], final
    # It ended after the grace, not at the first report.
    assert final["ts"] - min(e["ts"] for e in stalled) >= 2.0, (final["ts"], [e["ts"] for e in stalled])
    assert not find_job_processes(node.job_id)
