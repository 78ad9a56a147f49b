"""A node's preflight as its supervisor runs it (supervisor/node_preflight.py `run_preflight`): the
master and a node of one job on loopback, each asking its training Python (a child process) for its
versions, agreeing, and publishing the outcome; and the cases with nothing to agree on or a
training Python that cannot run."""

from __future__ import annotations

import importlib.metadata
import platform
import re
import sys
import threading
import time
from pathlib import Path

import pytest
from launches import make_launch
from supervisor_support import free_port, next_job_id, stream_events
from torchyard import protocol
from torchyard.supervisor.node_preflight import Agreement, run_preflight
from torchyard.supervisor.output_pump import OutputPump
from torchyard.supervisor.preflight import MasterListener, PreflightError, Versions
from torchyard.supervisor.publisher import EventPublisher, connect


class Side:
    """One node of the job: its launch, and a pump publishing to a real Redis."""

    def __init__(self, redis_url: str, **launch) -> None:
        self.launch = make_launch(master_addr="127.0.0.1", **launch)
        self.publisher = EventPublisher(self.launch, connect(redis_url))
        self.pump = OutputPump(self.publisher, lambda line: line, rank_start=self.launch.rank_start, keep=10,
                               on_torchrun_line=lambda line: None, on_step=lambda *step: None)

    def preflight(self, *, python: str = sys.executable, listener: MasterListener | None = None, warm: bool = False,
                  known: Versions | None = None) -> Agreement:
        return run_preflight(self.launch, self.pump, python=python, interface="lo", listener=listener, warm=warm,
                             tick=lambda phase: None, since=time.monotonic(), known=known)

    def published(self, redis_url: str) -> list[dict]:
        assert self.publisher.flush(budget_s=5)
        return [e for e in stream_events(redis_url, self.launch.job_id) if e["node_rank"] == self.launch.node_rank]


def preflight_in_thread(side: Side, **kwargs) -> tuple[threading.Thread, dict]:
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["agreement"] = side.preflight(**kwargs)
        except PreflightError as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def pair(redis_url: str, **launch) -> tuple[Side, Side]:
    """The master (node 0) and node 1 of a fresh two-node job, its master port free."""
    values = {"job_id": next_job_id(), "nnodes": 2, "master_port": free_port(), **launch}
    return Side(redis_url, node_rank=0, **values), Side(redis_url, node_rank=1, **values)


def test_a_one_node_job_and_one_of_launcher_none_have_nothing_to_agree_on(redis_url):
    for launch in ({"nnodes": 1, "node_rank": 0}, {"launcher": "none"}):
        side = Side(redis_url, job_id=next_job_id(), **launch)
        # A training Python that cannot run: nothing is asked of it.
        assert side.preflight(python="/nonexistent/python", warm=True) == Agreement(all_warm=True)
        assert side.published(redis_url) == []


def test_the_master_and_a_node_agree_on_loopback_and_each_publishes_its_passed_preflight(redis_url):
    master, node = pair(redis_url)
    listener = MasterListener(master.launch.master_port)
    try:
        thread, outcome = preflight_in_thread(master, listener=listener, warm=True)
        assert node.preflight(warm=True) == Agreement(all_warm=True)
        thread.join(timeout=30)
    finally:
        listener.close()
    assert outcome == {"agreement": Agreement(all_warm=True)}

    versions = {"python": platform.python_version(), "torch": importlib.metadata.version("torch")}
    [said] = [e for e in master.published(redis_url) if e["type"] == protocol.PREFLIGHT]
    assert (said["ok"], said["role"], said["interface"]) == (True, "master", "lo")
    assert {k: said[k] for k in versions} == versions and set(said["peers"]) == {"1"}
    [heard] = [e for e in node.published(redis_url) if e["type"] == protocol.PREFLIGHT]
    assert (heard["ok"], heard["role"], heard["master"]) == (True, "node", f"127.0.0.1:{master.launch.master_port}")
    assert {k: heard[k] for k in versions} == versions
    [line] = [e["line"] for e in node.published(redis_url) if e["type"] == protocol.LOG]
    assert line.startswith(f"preflight passed: reached the master 127.0.0.1:{master.launch.master_port}")
    # One machine, one network stack: the master finds no link between the nodes to measure.
    lines = [e["line"] for e in master.published(redis_url) if e["type"] == protocol.LOG]
    # How long it took is the machine's business (a loaded one takes seconds): that it says so is this test's.
    assert re.match(r"preflight passed in \d+\.\d+ s: master 127\.0\.0\.1:\d+ through lo", lines[0]), lines[0]
    assert lines[1].startswith("links: every node of the job shares this machine's network stack")


def test_a_node_without_a_warm_pool_makes_the_whole_job_start_cold_and_a_chosen_network_stands(redis_url):
    chosen = {"network": "10.0.1.0/24", "master_address": "10.0.1.5"}
    master, node = pair(redis_url, links=chosen)
    same = Versions(python="3.11.7", torch="2.13.0")
    listener = MasterListener(master.launch.master_port)
    try:
        thread, outcome = preflight_in_thread(master, listener=listener, warm=True, known=same)
        assert node.preflight(warm=False, known=same) == Agreement(False, "10.0.1.0/24", "10.0.1.5")
        thread.join(timeout=30)
    finally:
        listener.close()
    assert outcome == {"agreement": Agreement(False, "10.0.1.0/24", "10.0.1.5")}


def test_a_training_python_that_cannot_run_fails_the_preflight_and_publishes_why(redis_url, tmp_path: Path):
    _, node = pair(redis_url)
    missing = tmp_path / "bin" / "python"
    with pytest.raises(PreflightError, match=f"^preflight: cannot run the training Python {missing}"):
        node.preflight(python=str(missing))
    [failed] = [e for e in node.published(redis_url) if e["type"] == protocol.PREFLIGHT]
    assert failed["ok"] is False and str(missing) in failed["error"] and failed["interface"] == "lo"


def test_other_versions_on_a_node_fail_it_naming_both(redis_url):
    master, node = pair(redis_url)
    listener = MasterListener(master.launch.master_port)
    try:
        thread, outcome = preflight_in_thread(master, listener=listener, known=Versions("3.11.7", "2.13.0"))
        with pytest.raises(PreflightError) as refused:
            node.preflight(known=Versions("3.11.7", "2.12.1"))
        thread.join(timeout=30)
    finally:
        listener.close()
    assert str(refused.value).startswith("preflight: ")
    assert "torch 2.13.0 on Python 3.11.7" in str(refused.value) and "torch 2.12.1" in str(refused.value)
    assert "error" in outcome
