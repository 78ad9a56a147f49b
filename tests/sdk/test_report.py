"""sdk.report(): a printed line off Torchyard, one JSON datagram per event on it, never blocking."""

from __future__ import annotations

import json
import socket
import time

import pytest
from torchyard import sdk
from torchyard.sdk import events


@pytest.fixture
def receiver(tmp_path, monkeypatch):
    """A bound datagram socket standing in for the node supervisor."""
    path = str(tmp_path / "events.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(2)
    monkeypatch.setenv("TORCHYARD_EVENT_SOCKET", path)
    yield sock
    sock.close()


def drain(sock: socket.socket) -> list[dict]:
    received = []
    sock.setblocking(False)
    try:
        while True:
            received.append(json.loads(sock.recv(65536)))
    except BlockingIOError:
        return received
    finally:
        sock.settimeout(2)


def test_without_a_socket_it_prints_one_line(capsys):
    sdk.report(step=12, loss=0.25, throughput=1000.0, tokens=4096)
    assert capsys.readouterr().out == "[torchyard] step=12 loss=0.25 throughput=1000 tokens=4096\n"


def test_with_a_socket_it_sends_one_json_datagram_per_event(receiver, monkeypatch):
    import torch

    monkeypatch.setenv("RANK", "3")
    before = time.time()
    sdk.report(step=7, loss=torch.tensor(0.5), lr=1e-3, bad=float("nan"))
    event = json.loads(receiver.recv(65536))
    assert event.pop("ts") >= before
    assert event == {"type": "metric", "rank": 3, "step": 7, "loss": 0.5, "lr": 1e-3, "bad": None}


def test_reserved_keys_cannot_be_overwritten_by_metrics(receiver):
    sdk.report(step=1, type="spoof", rank=9, loss=1.0)
    event = json.loads(receiver.recv(65536))
    assert (event["type"], event["rank"], event["loss"]) == ("metric", 0, 1.0)


# A report that blocked on the full socket would hang here: the timeout fails it then. How fast a
# report is belongs to the benchmarks, not to a bound asserted on a shared machine.
@pytest.mark.timeout(30)
def test_a_socket_nobody_reads_never_blocks_and_drops_are_counted(receiver, monkeypatch):
    monkeypatch.setattr(events, "MAX_PENDING", 8)
    for step in range(2000):
        sdk.report(step=step, loss=1.0)
    channel = events.channel()
    assert channel.pending == 8
    assert channel.dropped == 2000 - channel.sent - channel.pending > 0

    # Once the supervisor reads again, queued events flow and the newest one says how many were lost.
    drained = drain(receiver)
    sdk.report(step=2000, loss=0.5)
    deadline = time.monotonic() + 5
    while channel.pending and time.monotonic() < deadline:
        drained += drain(receiver)
        channel.flush()
    drained += drain(receiver)
    last = drained[-1]
    assert last["step"] == 2000
    assert last["dropped"] == channel.dropped == sdk.events.dropped_count()


def test_a_missing_socket_queues_then_drops_and_delivers_once_it_appears(tmp_path, monkeypatch):
    monkeypatch.setattr(events, "MAX_PENDING", 4)
    path = tmp_path / "late.sock"
    monkeypatch.setenv("TORCHYARD_EVENT_SOCKET", str(path))
    for step in range(10):
        sdk.report(step=step, loss=1.0)
    assert (events.channel().pending, events.channel().dropped) == (4, 6)

    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as late:
        late.bind(str(path))
        assert events.channel().flush(timeout=2)  # reconnects within RECONNECT_INTERVAL
        sdk.report(step=10, loss=0.5)
        received = drain(late)
    assert [e["step"] for e in received] == [6, 7, 8, 9, 10]
    assert received[-1]["dropped"] == 6


def test_a_checkpoint_event_carries_the_manifest(receiver):
    manifest = {"step": 5, "files": [{"path": "state.pt", "size": 3, "sha256": "ab"}]}
    assert events.emit_checkpoint(5, "file:///x/step-00000005/manifest.json", manifest)
    event = json.loads(receiver.recv(65536))
    assert event["type"] == "checkpoint" and event["rank"] == 0 and event["step"] == 5
    assert event["uri"].endswith("step-00000005/manifest.json")
    assert event["manifest"] == manifest


def test_declared_total_steps_ride_on_every_later_report(receiver):
    sdk.report(step=1, loss=1.0)
    sdk.set_total_steps(500)
    sdk.report(step=2, loss=0.9)
    sdk.report(step=3, loss=0.8, total_steps=800)  # declared again, in report()
    sdk.report(step=4, loss=0.7)
    sent = [json.loads(receiver.recv(65536)) for _ in range(4)]
    assert [e.get("total_steps") for e in sent] == [None, 500, 800, 800]
    assert sdk.total_steps() == 800
    with pytest.raises(ValueError, match="positive"):
        sdk.set_total_steps(0)
