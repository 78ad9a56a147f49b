"""Launchers other than torchrun (none, command): their pure argv and environment builders, the
agent's peers.json and the SDK's peers() / on_membership_change() reading it."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import peer_files
import pytest
from launches import make_launch
from torchyard import protocol
from torchyard.agent import runs
from torchyard.protocol import NodeLaunch
from torchyard.sdk import on_membership_change, peers
from torchyard.sdk.peers import PeersTimeout
from torchyard.supervisor.argv import (
    EntrypointError,
    build_command_argv,
    build_env,
    build_launcher_env,
    build_plain_argv,
    plain_log_dir,
)
from torchyard.supervisor.tail import RankLogTailer

PEERS = [{"node_rank": 0, "host": "10.0.0.5", "machine": "gpu-a"},
         {"node_rank": 1, "host": "10.0.0.6", "machine": "gpu-b"},
         {"node_rank": 2, "host": "10.0.0.7", "machine": "gpu-c"}]


def launch(**overrides) -> NodeLaunch:
    """Node 1 of 3 of job 7 under launcher none, its peers listed out of order."""
    return make_launch(**{"nnodes": 3, "args": ["--lr", "0.1", "two words; rm -rf /"], "launcher": "none",
                          "peers": list(reversed(PEERS)), **overrides})


def test_launcher_none_runs_the_script_once_with_the_training_python():
    argv = build_plain_argv(launch(), Path("/work/train.py"), python="/venv/bin/python")
    assert argv == ["/venv/bin/python", "-m", "torchyard.rank_main", "/work/train.py", "--lr", "0.1",
                    "two words; rm -rf /"]


def test_launcher_none_runs_a_module_with_dash_m():
    assert build_plain_argv(launch(module="pkg.train"), None)[:5] == [
        sys.executable, "-m", "torchyard.rank_main", "-m", "pkg.train"]


def test_a_command_gets_exactly_its_placeholders_replaced_and_nothing_else():
    command = ["python", "-m", "torch.distributed.run", "--nnodes", "${NNODES}", "--node-rank", "${NODE_RANK}",
               "--nproc-per-node", "${NPROC_PER_NODE}", "--rdzv-endpoint=${MASTER_ADDR}:${MASTER_PORT}",
               "train.py", "--world", "${WORLD_SIZE}", "$NODE_RANK", "${HOME}", "`id`", "$(id)"]
    argv = build_command_argv(launch(launcher="command", command=command, nproc_per_node=2, world_size=6),
                              python="/venv/bin/python")
    assert argv == ["/venv/bin/python", "-m", "torch.distributed.run", "--nnodes", "3", "--node-rank", "1",
                    "--nproc-per-node", "2", "--rdzv-endpoint=10.0.0.5:29400", "train.py", "--world", "6",
                    "$NODE_RANK", "${HOME}", "`id`", "$(id)"]


@pytest.mark.parametrize("first", ["python", "python3"])
def test_python_as_the_first_word_is_the_nodes_training_python(first):
    assert build_command_argv(launch(launcher="command", command=[first, "-c", "0"]), python="/p/bin/python")[0] == \
        "/p/bin/python"


def test_other_programs_and_python_later_in_the_argv_stay_as_given():
    argv = build_command_argv(launch(launcher="command", command=["accelerate", "launch", "python"]), python="/p")
    assert argv == ["accelerate", "launch", "python"]


def test_a_command_launch_without_a_command_is_refused():
    with pytest.raises(EntrypointError, match="distributed.command"):
        build_command_argv(launch(launcher="command", command=[]))


def test_every_launcher_gets_the_peers_and_none_also_the_rank_variables(tmp_path):
    base = build_env(launch(env={"RANK": "99"}), tmp_path, {"PATH": "/bin"})
    env = build_launcher_env(launch(), base)
    assert env[protocol.ENV_PEERS] == "10.0.0.5,10.0.0.6,10.0.0.7"  # node-rank order, whatever the payload's
    assert (env["NODE_RANK"], env["NNODES"], env["MASTER_ADDR"], env["MASTER_PORT"]) == ("1", "3", "10.0.0.5", "29400")
    assert (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"]) == ("1", "3", "0")
    assert env[protocol.ENV_JOB_ID] == "7" and env["PATH"] == "/bin"  # build_env's stay
    torchrun = build_launcher_env(launch(launcher="torchrun"), {"PATH": "/bin"})
    assert torchrun[protocol.ENV_PEERS] == "10.0.0.5,10.0.0.6,10.0.0.7" and "RANK" not in torchrun


def test_a_plain_processs_log_files_are_where_the_rank_tailer_reads_local_rank_0(tmp_path):
    tailer = RankLogTailer(tmp_path / "torchrun", 1)
    folder = plain_log_dir(tmp_path, launch())
    folder.mkdir(parents=True)
    (folder / "stdout.log").write_text("hello\n")
    (folder / "stderr.log").write_text("oops\n")
    assert {(line.local_rank, line.stream, line.line) for line in tailer.poll()} == {
        (0, "stdout", "hello"), (0, "stderr", "oops")}


# --- peers.json: the agent writes it, the SDK reads it ----------------------------------------------
def membership(version: int, *statuses: str) -> dict:
    return peer_files.membership(PEERS, version, *statuses)


@pytest.fixture
def node_env(tmp_path, monkeypatch) -> Path:
    """The environment of node 1 of job 7 attempt 2, as its supervisor gives it, run directory made."""
    return peer_files.as_node(tmp_path, monkeypatch, PEERS, attempt=2)


def test_the_agent_writes_peers_json_and_never_goes_back_a_version(tmp_path):
    assert runs.write_peers(tmp_path, 7, 2, 1, membership(3, "running", "running", "pending"))["written"]
    assert not runs.write_peers(tmp_path, 7, 2, 1, membership(1, "running", "pending", "pending"))["written"]
    written = json.loads((runs.run_dir(tmp_path, 7, 2, 1) / protocol.PEERS_FILE).read_text())
    assert written["version"] == 3
    assert runs.run_dir(tmp_path, 7, 2, 1).stat().st_mode & 0o777 == 0o700


def test_off_torchyard_peers_is_this_machine(monkeypatch):
    monkeypatch.delenv(protocol.ENV_RUN_DIR, raising=False)
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    assert peers() == ["127.0.0.1"]
    monkeypatch.setenv("MASTER_ADDR", "10.1.1.1")
    assert peers(quorum=5) == ["10.1.1.1"]


def test_peers_returns_the_nodes_up_in_node_order_once_the_quorum_is(node_env):
    # Node 1 (this one) counts as up before the controller has heard of it.
    runs.write_peers(node_env, 7, 2, 1, membership(1, "running", "launching", "preparing"))
    assert peers(quorum=2, timeout=1) == ["10.0.0.5", "10.0.0.6"]


def test_a_node_that_already_exited_0_was_up_and_still_counts(node_env):
    # Node 0 saw node 1 running, returned from peers(), finished and exited 0 before node 1 looked:
    # node 1 must get the same answer. A node that failed was not up.
    runs.write_peers(node_env, 7, 2, 1, membership(4, "completed", "running", "failed"))
    assert peers(quorum=2, timeout=0) == ["10.0.0.5", "10.0.0.6"]
    with pytest.raises(PeersTimeout, match=r"missing: node 2 \(gpu-c, failed\)"):
        peers(timeout=0)


def test_peers_waits_for_the_update_that_brings_the_quorum(node_env):
    writer = threading.Timer(0.3, runs.write_peers, (node_env, 7, 2, 1, membership(3, "running", "running", "running")))
    writer.start()
    try:
        # Only the update names three nodes running: peers() waited for it.
        assert peers(timeout=10) == ["10.0.0.5", "10.0.0.6", "10.0.0.7"]
    finally:
        writer.cancel()


def test_the_timeout_names_the_nodes_still_missing(node_env):
    runs.write_peers(node_env, 7, 2, 1, membership(1, "running", "preparing", "launching"))
    with pytest.raises(TimeoutError, match=r"missing: node 2 \(gpu-c, launching\)") as raised:
        peers(timeout=0.2)
    assert isinstance(raised.value, PeersTimeout)
    assert [n["node_rank"] for n in raised.value.missing] == [2]


def test_before_any_update_only_the_node_itself_is_up(node_env):
    assert peers(quorum=1, timeout=0) == ["10.0.0.6"]
    with pytest.raises(PeersTimeout, match=r"node 0 \(10.0.0.5\), node 2 \(10.0.0.7\)"):
        peers(quorum=2, timeout=0.1)


def test_a_quorum_larger_than_the_job_is_refused(node_env):
    with pytest.raises(ValueError, match="quorum 4"):
        peers(quorum=4, timeout=0)


def test_on_membership_change_calls_back_with_old_and_new_nodes(node_env):
    runs.write_peers(node_env, 7, 2, 1, membership(3, "running", "running", "running"))
    seen: list[tuple[list, list]] = []
    on_membership_change(lambda old, new: seen.append((old, new)))
    time.sleep(0.2)
    runs.write_peers(node_env, 7, 2, 1, membership(4, "running", "running", "lost"))
    deadline = time.monotonic() + 5
    while not seen and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(seen) == 1
    old, new = seen[0]
    assert [n["status"] for n in old] == ["running"] * 3
    assert [n["status"] for n in new] == ["running", "running", "lost"]


def test_torchyard_run_launcher_none_goes_into_the_spec(tmp_path):
    from torchyard.client.specfile import run_spec

    spec = run_spec(target="train.py", module=False, args=[], directory=tmp_path, nnodes=2, nproc_per_node=1,
                    launcher="none")
    assert spec["distributed"] == {"launcher": "none"}
    assert "distributed" not in run_spec(target="train.py", module=False, args=[], directory=tmp_path, nnodes=1,
                                         nproc_per_node=1, launcher="torchrun")
