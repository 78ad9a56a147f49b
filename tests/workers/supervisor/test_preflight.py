"""Preflight between a master and its nodes over real sockets on loopback (supervisor/preflight.py)."""

from __future__ import annotations

import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from torchyard.node.versions import PreflightError, Versions, training_versions
from torchyard.supervisor.preflight import MasterListener, disagreement, reach_master

SAME = Versions(python="3.11.7", torch="2.13.0")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def hello(rank: int = 1, *, job: int = 7, attempt: int = 0, versions: Versions = SAME) -> dict:
    return {"job": job, "attempt": attempt, "node_rank": rank, "hostname": f"host-{rank}",
            "python": versions.python, "torch": versions.torch}


def idle(_phase: str) -> None:
    pass


def serve_in_thread(listener: MasterListener, peers: set[int], versions: Versions = SAME, delay: float = 0.0,
                    warm: bool = False):
    outcome: dict = {}

    def run() -> None:
        time.sleep(delay)  # the master still preparing its own code
        try:
            outcome["peers"] = listener.serve(job_id=7, attempt=0, peers=peers, versions=versions, tick=idle,
                                              warm=warm)
        except PreflightError as exc:
            outcome["error"] = str(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def test_every_node_reaches_the_master_and_the_master_hears_every_node():
    port = free_port()
    listener = MasterListener(port)
    thread, outcome = serve_in_thread(listener, {1, 2})
    try:
        reached = reach_all(port, [hello(rank) for rank in (1, 2)])
        thread.join(5)
    finally:
        listener.close()
    assert sorted(outcome["peers"]) == [1, 2]
    assert outcome["peers"][2]["hostname"] == "host-2"
    assert all(r.master == f"127.0.0.1:{port}" and r.local_address == "127.0.0.1" for r in reached)


def reach_all(port: int, hellos: list[dict]) -> list:
    """Every node's reach_master at once (the master answers them together, once all are there)."""
    with ThreadPoolExecutor(len(hellos)) as pool:
        return list(pool.map(lambda h: reach_master("127.0.0.1", port, h, idle), hellos))


@pytest.mark.parametrize(("master", "nodes", "agreed"), [
    (True, (True, True), True), (True, (True, False), False), (False, (True, True), False)])
def test_a_job_starts_warm_only_when_every_node_can(master, nodes, agreed):
    port = free_port()
    listener = MasterListener(port)
    thread, outcome = serve_in_thread(listener, {1, 2}, warm=master)
    try:
        reached = reach_all(port, [hello(rank) | {"warm": can} for rank, can in zip((1, 2), nodes, strict=True)])
        thread.join(5)
    finally:
        listener.close()
    assert [r.warm for r in reached] == [agreed, agreed]
    assert {rank: h["warm"] for rank, h in outcome["peers"].items()} == {1: nodes[0], 2: nodes[1]}


def test_a_node_that_connects_while_the_master_still_prepares_waits_for_its_answer():
    port = free_port()
    listener = MasterListener(port)
    thread, outcome = serve_in_thread(listener, {1}, delay=1.0)
    try:
        reached = reach_master("127.0.0.1", port, hello(), idle)
        thread.join(5)
    finally:
        listener.close()
    assert reached.waited_s >= 0.9 and list(outcome["peers"]) == [1]


def test_other_versions_fail_both_sides_naming_both():
    port = free_port()
    listener = MasterListener(port)
    thread, outcome = serve_in_thread(listener, {1})
    try:
        with pytest.raises(PreflightError, match=r"torch 2\.13\.0 on Python 3\.11\.7, this node torch 2\.4\.1"):
            reach_master("127.0.0.1", port, hello(versions=Versions(python="3.11.2", torch="2.4.1")), idle)
        thread.join(5)
    finally:
        listener.close()
    assert "node 1 (host-1) has torch 2.4.1 on Python 3.11.2" in outcome["error"]


def test_a_node_of_another_job_is_told_and_does_not_count():
    port = free_port()
    listener = MasterListener(port)
    thread, outcome = serve_in_thread(listener, {1})
    try:
        with pytest.raises(PreflightError, match="serves job 7 attempt 0, not job 8 attempt 0"):
            reach_master("127.0.0.1", port, hello(job=8), idle)
        reach_master("127.0.0.1", port, hello(), idle)
        thread.join(5)
    finally:
        listener.close()
    assert list(outcome["peers"]) == [1]


def test_nothing_listening_fails_within_its_own_limit_naming_address_and_cause():
    # A refusal gives up after nothing_listens_after, not after the (here hour-long) limit for an
    # address that does not answer at all: the call returning is the proof.
    port = free_port()
    with pytest.raises(PreflightError, match=rf"cannot reach the master at 127\.0\.0\.1:{port}: connection refused"):
        reach_master("127.0.0.1", port, hello(), idle, unreachable_after=3600, nothing_listens_after=0.6)


def test_something_else_on_the_port_is_named():
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        # The other service accepts and closes without a word.
        threading.Thread(target=lambda: other.accept()[0].close(), daemon=True).start()
        with pytest.raises(PreflightError, match="closed the preflight connection without an answer"):
            reach_master("127.0.0.1", port, hello(), idle)


def test_a_taken_master_port_is_refused_before_any_work():
    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        with pytest.raises(PreflightError, match=f"master port {taken.getsockname()[1]} in use"):
            MasterListener(taken.getsockname()[1])


def test_a_stop_while_waiting_aborts_the_wait():
    port = free_port()
    listener = MasterListener(port)

    class Stop(Exception):
        pass

    calls = []

    def tick(phase: str) -> None:
        calls.append(phase)
        if len(calls) > 3:
            raise Stop

    try:
        with pytest.raises(Stop):
            listener.serve(job_id=7, attempt=0, peers={1}, versions=SAME, tick=tick)
    finally:
        listener.close()
    assert calls[0] == "waiting for node(s) 1 to reach the master"


def test_versions_agree_on_torch_exactly_and_python_by_minor():
    assert disagreement(SAME, Versions(python="3.11.2", torch="2.13.0")) == ""
    assert disagreement(SAME, Versions(python="3.12.1", torch="2.13.0"))
    assert disagreement(SAME, Versions(python="3.11.7", torch="2.13.0+cu128")) == ""  # another build
    assert disagreement(SAME, Versions(python="3.11.7", torch="2.13.1"))


def test_the_training_pythons_versions_are_read_without_importing_torch():
    found = training_versions(sys.executable)
    assert found.python == ".".join(map(str, sys.version_info[:3]))
    assert found.torch.startswith("2.13")
