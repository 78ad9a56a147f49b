"""The supervisor's parts on their own: publisher, log tails, SDK socket, process-tree helpers."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from launches import make_launch
from supervisor_support import free_port, next_job_id, stream_events
from torchyard import protocol
from torchyard.node.proctree import TreeSampler, find_job_processes, kill_process_tree
from torchyard.protocol import NodeLaunch
from torchyard.supervisor.event_socket import EventSocket
from torchyard.supervisor.publisher import EventPublisher, connect
from torchyard.supervisor.states import SupervisorSettings
from torchyard.supervisor.tail import MAX_LINE_BYTES, FileTail, RankLogTailer


def a_launch(**overrides) -> NodeLaunch:
    """Node 41 (node rank 1) of attempt 3 of a fresh job: its events are the only ones of that job."""
    return make_launch(**{"job_id": next_job_id(), "attempt": 3, "node_id": 41, "nproc_per_node": 2, **overrides})


# --- publisher -------------------------------------------------------------------------------------
def test_it_publishes_a_burst_in_order_with_the_envelope(redis_url: str):
    launch = a_launch()
    publisher = EventPublisher(launch, connect(redis_url), batch_size=500)
    for i in range(1200):
        # An envelope the event carries is the node's: its seq and job are replaced.
        publisher.emit({"type": protocol.LOG, "stream": "stdout", "line": f"line {i}", "seq": 999, "job": 1}, rank=2)
    assert publisher.flush(budget_s=5)
    events = stream_events(redis_url, launch.job_id)
    assert [e["seq"] for e in events] == list(range(1, 1201))
    assert [e["line"] for e in events[:2]] == ["line 0", "line 1"]
    first = events[0]
    assert {k: first[k] for k in ("type", "job", "attempt", "node", "node_rank", "rank", "stream")} == {
        "type": "log",
        "job": launch.job_id,
        "attempt": 3,
        "node": 41,
        "node_rank": 1,
        "rank": 2,
        "stream": "stdout",
    }
    assert isinstance(first["ts"], float)
    assert publisher.published == 1200 and publisher.pending == 0


def test_an_unreachable_redis_keeps_events_and_never_stalls_the_loop(redis_url: str):
    launch = a_launch()
    publisher = EventPublisher(launch, connect(f"redis://127.0.0.1:{free_port()}/0"))
    publisher.emit({"type": protocol.STATE, "status": "running", "reason": "", "scope": "node"})
    assert publisher.flush() is False
    assert publisher.flush() is False  # backing off: no second attempt right away
    assert publisher.pending == 1 and publisher.last_error

    publisher.client = connect(redis_url)  # Redis is back
    publisher.emit({"type": protocol.STATE, "status": "completed", "reason": "", "scope": "node"})
    assert publisher.drain(timeout_s=5)
    assert [(e["seq"], e["status"]) for e in stream_events(redis_url, launch.job_id)] == [
        (1, "running"),
        (2, "completed"),
    ]


def test_a_full_buffer_drops_resource_samples_then_oldest_logs_but_never_states_and_keeps_one_heartbeat():
    publisher = EventPublisher(a_launch(), None, max_buffer=100)
    publisher.emit({"type": protocol.STATE, "status": "running", "reason": "", "scope": "node"})
    for i in range(10):
        publisher.emit({"type": protocol.HEARTBEAT, "status": "running", "pid": None, "pending_events": i})
        publisher.emit({"type": protocol.RESOURCE, "cpu_percent": 0.0, "rss_mb": 0.0, "processes": 0})
        publisher.emit({"type": protocol.METRIC, "step": i})
    for i in range(95):
        publisher.emit({"type": protocol.LOG, "stream": "stdout", "line": f"line {i}"})
    # 116 buffered; past 100 it sheds to 90 at once: twice, then 4 more arrive. Heartbeats are
    # not buffered: the newest waits, alone, to go first.
    assert publisher.pending == 94 + 1
    assert publisher.dropped == {"resource": 10, "log": 12}
    assert publisher._beat is not None and publisher._beat["pending_events"] == 9 and publisher._beat["seq"] is None
    kept = list(publisher._buffer)
    assert [e["seq"] for e in kept][:2] == [1, 3]  # persisted events are numbered without heartbeats
    assert kept[0]["type"] == "state" and sum(e["type"] == "metric" for e in kept) == 10
    assert [e["line"] for e in kept if e["type"] == "log"][0] == "line 12"
    assert publisher.flush() is False and publisher.drain(timeout_s=1) is False


def test_a_flush_packs_its_events_into_few_entries_that_decode_to_the_same_events(redis_url: str):
    launch = a_launch()
    publisher = EventPublisher(launch, connect(redis_url))
    client = redis.Redis.from_url(redis_url)
    before = client.xlen(protocol.EVENT_STREAM)
    lines = [f"line {i} \u00e9 \" \\ \t" for i in range(1500)] + ["x" * 100_000]
    for line in lines:
        publisher.emit({"type": protocol.LOG, "stream": "stdout", "line": line}, rank=2)
    assert publisher.flush(budget_s=5)
    entries = client.xlen(protocol.EVENT_STREAM) - before
    assert entries <= 10  # up to 500 events or ~64 KB an entry, not one per event
    events = stream_events(redis_url, launch.job_id)
    assert [e["line"] for e in events] == lines and [e["seq"] for e in events] == list(range(1, 1502))


def test_it_stops_adding_while_ingest_is_behind_and_goes_on_once_it_caught_up(redis_url: str):
    from torchyard.supervisor import publisher as publisher_module

    launch = a_launch(machine_token=f"{next_job_id()}.{'s' * 32}")  # a machine stream of its own
    client = redis.Redis.from_url(redis_url)
    publisher = EventPublisher(launch, connect(redis_url), batch_size=100)
    for i in range(300):
        publisher.emit({"type": protocol.LOG, "stream": "stdout", "line": f"line {i}"})
    assert publisher.flush(budget_s=5)  # nobody reads the stream yet: nothing to wait for

    # Ingest reads it now, and is behind by more than the high-water mark.
    client.xgroup_create(publisher.event_stream, protocol.EVENT_GROUP, id="0")
    publisher._group_checked_at = -publisher_module.GROUP_CHECK_S  # look again now
    backlog = [client.xadd(publisher.event_stream, {"e": "{}"}) for _ in range(publisher_module.STREAM_HIGH_WATER)]
    for i in range(300, 600):
        publisher.emit({"type": protocol.LOG, "stream": "stdout", "line": f"line {i}"})
    assert publisher.flush(budget_s=5) is False  # one batch went, then it waits
    held = client.xlen(publisher.event_stream)
    assert publisher.flush(budget_s=1) is False and client.xlen(publisher.event_stream) == held
    assert publisher.pending == 200 and publisher.room == publisher.read_ahead - 200

    client.xdel(publisher.event_stream, *backlog)  # ingest stored them and deleted them
    assert publisher.flush(budget_s=5)
    lines = [e["line"] for _, fields in client.xrange(publisher.event_stream) for e in protocol.decode_entry(fields)
             if e.get("job") == launch.job_id]
    assert lines == [f"line {i}" for i in range(600)]


# --- tails -----------------------------------------------------------------------------------------
def test_a_tail_asked_for_fewer_lines_leaves_the_rest_in_the_file(tmp_path: Path):
    path = tmp_path / "out.log"
    path.write_bytes(b"".join(f"line {i}\n".encode() for i in range(10)) + b"part")
    tail = FileTail(path)
    assert tail.read_lines(max_lines=3) == ["line 0", "line 1", "line 2"] and not tail.at_end
    assert tail.read_lines(max_lines=0) == [] and not tail.at_end
    assert tail.read_lines(max_lines=4) == ["line 3", "line 4", "line 5", "line 6"]
    assert tail.read_lines() == ["line 7", "line 8", "line 9"] and tail.at_end
    assert tail.read_lines(final=True, max_lines=5) == ["part"]
    tail.close()


def test_a_tailer_with_little_room_shares_it_so_no_rank_waits_behind_another(tmp_path: Path):
    log_dir = tmp_path / "torchrun"
    tailer = RankLogTailer(log_dir, nproc_per_node=2)
    for local_rank, count in ((0, 1000), (1, 5)):
        folder = log_dir / "torchyard-1-1_abc" / "attempt_0" / str(local_rank)
        folder.mkdir(parents=True)
        (folder / "stdout.log").write_text("".join(f"r{local_rank} {i}\n" for i in range(count)))
    lines = tailer.poll(max_lines=20)
    assert len(lines) == 20 and [x.line for x in lines if x.local_rank == 1] == [f"r1 {i}" for i in range(5)]
    assert not tailer.at_end
    rest = []
    while (more := tailer.poll(max_lines=300)) or not tailer.at_end:
        rest += more
    seen = [x.line for x in lines + rest if x.local_rank == 0]
    assert seen == [f"r0 {i}" for i in range(1000)]
    tailer.close()


def test_a_tail_hands_back_whole_lines_and_the_last_one_at_the_end(tmp_path: Path):
    path = tmp_path / "out.log"
    tail = FileTail(path)
    assert tail.read_lines() == []  # not there yet
    with open(path, "ab") as f:
        f.write(b"one\ntw")
        f.flush()
        assert tail.read_lines() == ["one"]
        f.write(b"o\r\nthree")
        f.flush()
        assert tail.read_lines() == ["two"]
        f.write(b"\xff" + b"x" * (MAX_LINE_BYTES + 10))
        f.flush()
        cut = tail.read_lines()
    assert len(cut) == 1 and cut[0].startswith("three\ufffd") and len(cut[0]) == MAX_LINE_BYTES
    assert tail.read_lines(final=True) == ["x" * 16]
    tail.close()


def test_the_rank_tailer_finds_each_ranks_files_and_skips_an_earlier_run(tmp_path: Path):
    log_dir = tmp_path / "torchrun"
    old = log_dir / "none_old" / "attempt_0" / "0"
    old.mkdir(parents=True)
    (old / "stdout.log").write_text("stale\n")
    tailer = RankLogTailer(log_dir, nproc_per_node=2)
    assert tailer.poll() == []
    for local_rank in (0, 1):
        folder = log_dir / "torchyard-1-1_abc" / "attempt_0" / str(local_rank)
        folder.mkdir(parents=True)
        (folder / "stdout.log").write_text(f"out {local_rank}\n")
        (folder / "stderr.log").write_text(f"err {local_rank}")
        (folder / "error.json").write_text("{}")
    lines = [(item.local_rank, item.stream, item.line) for item in tailer.poll()]
    assert lines == [(0, "stdout", "out 0"), (1, "stdout", "out 1")]
    lines = [(item.local_rank, item.stream, item.line) for item in tailer.poll(final=True)]
    assert lines == [(0, "stderr", "err 0"), (1, "stderr", "err 1")]
    tailer.close()


# --- SDK socket ------------------------------------------------------------------------------------
def test_the_event_socket_takes_json_objects_and_counts_the_rest(tmp_path: Path):
    path = tmp_path / "events.sock"
    path.write_text("stale")
    events = EventSocket(path)
    try:
        assert oct(path.stat().st_mode & 0o777) == "0o600"
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
            for payload in (
                b'{"type": "metric", "rank": 0, "loss": 1.5}',
                b"not json",
                b"[1]",
                b'{"no": "type"}',
            ):
                sender.sendto(payload, str(path))
            sender.sendto(json.dumps({"type": "checkpoint", "rank": 0, "step": 10}).encode(), str(path))
        assert events.receive() == [
            {"type": "metric", "rank": 0, "loss": 1.5},
            {"type": "checkpoint", "rank": 0, "step": 10},
        ]
        assert events.rejected == 3
        assert events.receive() == []
    finally:
        events.close()
    assert not path.exists()


# --- process helpers -------------------------------------------------------------------------------
PARENT_WITH_CHILD = """
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print("ready", flush=True)
time.sleep(60)
"""


def test_job_processes_are_found_by_environment_and_killed_as_a_tree():
    job_id = next_job_id()
    env = {
        **os.environ,
        protocol.ENV_JOB_ID: str(job_id),
        protocol.ENV_ATTEMPT: "2",
        protocol.ENV_NODE_RANK: "0",
    }
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT_WITH_CHILD], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout.readline().strip() == "ready"
        found = find_job_processes(job_id, attempt=2, node_rank=0)
        assert len(found) == 2 and parent.pid in {p.pid for p in found}
        assert find_job_processes(job_id, attempt=1) == []
        assert find_job_processes(job_id, node_rank=1) == []

        sample = TreeSampler().sample(parent.pid)
        assert sample["processes"] == 2 and sample["rss_mb"] > 0

        assert kill_process_tree(parent.pid, grace=2.0) == []
        assert find_job_processes(job_id) == []
    finally:
        if parent.poll() is None:
            parent.kill()
        parent.wait()


def test_supervisor_timings_come_from_the_environment_and_bad_ones_fail_loudly():
    settings = SupervisorSettings.from_env({"TORCHYARD_SUPERVISOR_WATCHDOG_S": "2.5"})
    assert settings.watchdog_s == 2.5 and settings.stop_grace_s == 5.0
    with pytest.raises(ValueError):
        SupervisorSettings.from_env({"TORCHYARD_SUPERVISOR_STOP_GRACE_S": "soon"})
    with pytest.raises(ValueError):
        SupervisorSettings.from_env({"TORCHYARD_SUPERVISOR_STOP_GRACE_S": "0"})


def test_ranks_get_the_interface_that_routes_to_the_master_unless_the_job_names_one():
    from torchyard.supervisor.network import interface_env, interface_towards

    assert interface_towards("127.0.0.1") == ("lo", "127.0.0.1")
    assert interface_env("127.0.0.1", "gloo", {}) == {"GLOO_SOCKET_IFNAME": "lo"}
    assert interface_env("127.0.0.1", "nccl", {}) == {"GLOO_SOCKET_IFNAME": "lo", "NCCL_SOCKET_IFNAME": "lo"}
    assert interface_env("127.0.0.1", "nccl", {"NCCL_SOCKET_IFNAME": "ib0"}) == {"GLOO_SOCKET_IFNAME": "lo"}
    assert interface_env("no-such-host.invalid", "gloo", {}) == {}
