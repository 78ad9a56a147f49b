"""The preflight's link measurement (supervisor/links.py): real probes over loopback between a master
and its nodes, and the master's choice from given figures."""

from __future__ import annotations

import itertools
import shutil
import socket
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from torchyard.node import network
from torchyard.supervisor import links
from torchyard.supervisor.preflight import LinkProbe, MasterListener, Versions, reach_master

SAME = Versions(python="3.11.7", torch="2.13.0")
# Two "networks" on loopback, so that every node has an address on each, as hosts with a management
# Ethernet and a fabric do: 127.0.0.0/8 holds the master's registered address.
LOOPBACK = [{"interface": "lo", "address": "127.0.0.1", "network": "127.0.0.0/8", "speed_mbit": 0},
            {"interface": "lo:fabric", "address": "127.0.0.2", "network": "127.0.0.2/32", "speed_mbit": 0}]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("n", range(1, 10))
def test_every_pair_is_probed_once_and_no_node_probes_much_more_than_another(n):
    ranks = list(range(n))
    probed = [(me, peer) for me in ranks for peer in links.my_peers(ranks, me)]
    assert sorted(tuple(sorted(p)) for p in probed) == list(itertools.combinations(ranks, 2))
    counts = [len(links.my_peers(ranks, me)) for me in ranks]
    assert max(counts) - min(counts) <= 1


def preflight(stacks: list[str]) -> tuple[list[LinkProbe], list]:
    """A master and two nodes through the preflight with link probes, node i on network stack
    `stacks[i]`: (the three probes, what each node reached)."""
    port = free_port()
    listener = MasterListener(port)
    servers = [links.ProbeServer() for _ in range(3)]
    probes = [LinkProbe(port=s.port, addresses=LOOPBACK, seconds=0.2, stack=stack) for s, stack in zip(servers, stacks, strict=True)]

    def serve() -> None:
        listener.serve(job_id=7, attempt=0, peers={1, 2}, versions=SAME, tick=lambda _: None, links=probes[0],
                       master_addr="127.0.0.1", machines={0: "gpu-a", 1: "gpu-b", 2: "gpu-c"})

    master = threading.Thread(target=serve, daemon=True)
    master.start()
    try:
        with ThreadPoolExecutor(2) as pool:
            reached = list(pool.map(
                lambda rank: reach_master("127.0.0.1", port, {"job": 7, "attempt": 0, "node_rank": rank,
                                                              "python": SAME.python, "torch": SAME.torch},
                                          lambda _: None, links=probes[rank]), (1, 2)))
        master.join(20)
    finally:
        listener.close()
        for server in servers:
            server.close()
    return probes, reached


def test_a_master_and_two_nodes_measure_every_pair_on_every_shared_network_and_agree_on_the_choice():
    probes, reached = preflight(["host-a", "host-b", "host-c"])
    report = probes[0].report
    assert report is not None and [r.links for r in reached] == [report, report]
    assert {(p["network"], *sorted((p["a"], p["b"]))) for p in report["pairs"]} == {
        (net, a, b) for net in ("127.0.0.0/8", "127.0.0.2/32") for a, b in itertools.combinations(range(3), 2)}
    assert all(p["mb_per_s"] > 0 and p["latency_ms"] > 0 and not p.get("error") for p in report["pairs"])
    assert [n["usable"] for n in report["networks"]] == [True, True]
    assert report["chosen"] in ("127.0.0.0/8", "127.0.0.2/32")
    chosen = next(n for n in report["networks"] if n["chosen"])
    assert report["master_address"] == ("127.0.0.1" if chosen["network"] == "127.0.0.0/8" else "127.0.0.2")
    assert report["addresses"] == {m: report["master_address"] for m in ("gpu-a", "gpu-b", "gpu-c")}
    assert report["machines"] == {"0": "gpu-a", "1": "gpu-b", "2": "gpu-c"}
    assert report["summary"].startswith(f"traffic pinned to {chosen['network']}")


def test_nodes_on_one_network_stack_measure_nothing_and_pin_nothing():
    # Agents side by side on one host: their bytes never leave it, whatever address they dial, and an
    # interface of the host (a container's bridge) may vanish under the job.
    probes, reached = preflight(["boot/ns", "boot/ns", "boot/ns"])
    assert probes[0].one_stack and probes[0].report is None
    assert [r.links for r in reached] == [None, None]


def test_only_the_pairs_on_different_stacks_are_measured():
    probes, reached = preflight(["host-a", "host-a", "host-b"])
    report = probes[0].report
    assert report is not None and not probes[0].one_stack and [r.links for r in reached] == [report, report]
    assert {(p["network"], *sorted((p["a"], p["b"]))) for p in report["pairs"]} == {
        (net, a, 2) for net in ("127.0.0.0/8", "127.0.0.2/32") for a in (0, 1)}
    assert [n["usable"] for n in report["networks"]] == [True, True] and report["chosen"]


def test_another_process_shares_the_network_stack_and_a_new_namespace_does_not():
    if shutil.which("unshare") is None:
        pytest.skip("util-linux's unshare is missing")
    stack = [sys.executable, "-c", "from torchyard.node import network; print(network.network_stack())"]
    here = subprocess.run(stack, capture_output=True, text=True, check=True).stdout.strip()
    apart = subprocess.run(["unshare", "--net", *stack], capture_output=True, text=True, check=True).stdout.strip()
    assert here and here == network.network_stack()
    assert apart and apart != here and apart.split("/")[0] == here.split("/")[0]  # one boot, two namespaces


def test_a_probe_to_a_port_nobody_serves_reports_the_kernels_words():
    figure = links.probe("127.0.0.1", "127.0.0.1", free_port(), 0.1)
    assert figure == {"error": "connection refused"}


ROSTER = {rank: {"probe_port": 1, "addresses": [
    {"interface": "eth0", "address": f"10.0.0.{rank + 1}", "network": "10.0.0.0/24"},
    {"interface": "ib0", "address": f"10.9.0.{rank + 1}", "network": "10.9.0.0/24"}]} for rank in range(3)}
MACHINES = {0: "gpu-a", 1: "gpu-b", 2: "gpu-c"}


def figures(rates: dict[str, list[float | None]]) -> list[dict]:
    """Figures for the three pairs (0,1), (1,2), (2,0) on each network; None: the pair failed."""
    out = []
    for net, values in rates.items():
        for (a, b), rate in zip([(0, 1), (1, 2), (2, 0)], values, strict=True):
            out.append({"network": net, "a": a, "b": b, "error": "no route to host"} if rate is None else
                       {"network": net, "a": a, "b": b, "mb_per_s": rate, "latency_ms": 0.2})
    return out


def choose(rates: dict[str, list[float | None]]) -> dict:
    return links.choose(ROSTER, figures(rates), master_addr="10.0.0.1", machines=MACHINES, seconds=0.6)


def test_the_network_whose_slowest_pair_is_fastest_is_chosen_and_the_slow_pairs_are_named():
    report = choose({"10.0.0.0/24": [110.0, 6.0, 112.0], "10.9.0.0/24": [900.0, 880.0, 910.0]})
    assert report["chosen"] == "10.9.0.0/24" and report["master_address"] == "10.9.0.1"
    assert report["addresses"] == {"gpu-a": "10.9.0.1", "gpu-b": "10.9.0.2", "gpu-c": "10.9.0.3"}
    flagged = [(p["network"], p["a"], p["b"]) for p in report["pairs"] if p["flagged"]]
    assert flagged == [("10.0.0.0/24", 0, 1), ("10.0.0.0/24", 1, 2), ("10.0.0.0/24", 2, 0)]
    assert "10.0.0.0/24 between gpu-b and gpu-c: 6 MB/s, below half the median (496 MB/s)" in report["summary"]
    assert [n["interfaces"] for n in report["networks"]] == [{"0": "eth0", "1": "eth0", "2": "eth0"},
                                                            {"0": "ib0", "1": "ib0", "2": "ib0"}]


def test_the_registered_network_is_kept_unless_another_is_clearly_faster():
    assert choose({"10.0.0.0/24": [100.0, 100.0, 100.0], "10.9.0.0/24": [105.0, 108.0, 109.0]})["chosen"] == "10.0.0.0/24"
    assert choose({"10.0.0.0/24": [100.0, 100.0, 100.0], "10.9.0.0/24": [130.0, 128.0, 129.0]})["chosen"] == "10.9.0.0/24"


def test_a_network_with_a_pair_that_cannot_connect_is_never_chosen_and_none_usable_keeps_the_default():
    report = choose({"10.0.0.0/24": [50.0, 50.0, 50.0], "10.9.0.0/24": [900.0, None, 900.0]})
    assert report["chosen"] == "10.0.0.0/24"
    assert "10.9.0.0/24 between gpu-b and gpu-c: no route to host" in report["summary"]
    report = choose({"10.0.0.0/24": [None, 50.0, 50.0], "10.9.0.0/24": [900.0, None, 900.0]})
    assert report["chosen"] == "" and report["master_address"] == "" and report["addresses"] == {}
    assert report["summary"].startswith("no network every pair could use")


@pytest.mark.parametrize("figure", [
    "text", {"a": 2, "b": 1, "network": "n", "mb_per_s": 1, "latency_ms": 1},  # not the sender's pair
    {"a": 1, "b": "2", "network": "n", "mb_per_s": 1, "latency_ms": 1}, {"a": 1, "b": 2, "network": "n"},
    {"a": 1, "b": 2, "network": "n", "mb_per_s": True, "latency_ms": 1}])
def test_figures_a_node_sends_are_checked_before_the_master_uses_them(figure):
    assert not links.well_formed(figure, 1)
    assert links.well_formed({"a": 1, "b": 2, "network": "n", "mb_per_s": 1.5, "latency_ms": 0.1}, 1)
