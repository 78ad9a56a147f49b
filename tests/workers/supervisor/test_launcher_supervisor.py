"""The node supervisor under launchers other than torchrun (none, command), as processes with real
Redis: the rank's lines are tailed and masked, failures name the launcher, a stop ends the process."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest
from launches import make_launch
from supervisor_support import final_states, free_port, job_processes, states, wait_until_no_job_processes

pytestmark = pytest.mark.timeout(90)

PLAIN = """
import os, sys, time
print("peers", os.environ["TORCHYARD_PEERS"], "node", os.environ["NODE_RANK"], "of", os.environ["NNODES"],
      "rank", os.environ["RANK"], "world", os.environ["WORLD_SIZE"], "token", os.environ["TOKEN"], flush=True)
if sys.argv[1] == "fail":
    print("giving up", file=sys.stderr, flush=True)
    sys.exit(1)
while True:
    print("tick", flush=True)
    time.sleep(0.2)
"""

PEERS = [{"node_rank": 0, "host": "127.0.0.1", "machine": "a"}, {"node_rank": 1, "host": "127.0.0.2", "machine": "b"}]


@pytest.fixture
def plain_script(code_root: Path) -> str:
    (code_root / "scripts" / "plain.py").write_text(PLAIN)
    return "scripts/plain.py"


def lines(events: list[dict]) -> list[dict]:
    return [e for e in events if e["type"] == "log" and e.get("source") == "worker"]


def test_launcher_none_runs_the_script_once_and_its_failure_names_python(supervisors, job_launch, plain_script):
    # Node 1 of 2 that never meets node 0: launcher none has no preflight, the script is on its own.
    node = job_launch(launcher="none", entrypoint=plain_script, args=["fail"], node_rank=1, nnodes=2,
                       world_size=2, master_port=free_port(), peers=PEERS, secret_env={"TOKEN": "s3cret-value"})
    proc, run_dir = supervisors.start(node)
    assert proc.wait(timeout=40) == 1  # the supervisor of a failed node
    events = supervisors.events(node.job_id)
    [final] = final_states(events, 1)
    assert final["status"] == "failed" and final["exit_code"] == 1
    assert final["reason"] == "node rank 1: python exited with code 1"
    assert {"rank": 1, "stream": "stderr", "line": "giving up"} in final["last_lines"]
    said = [(e["rank"], e["stream"], e["line"]) for e in lines(events)]
    assert (1, "stdout", "peers 127.0.0.1,127.0.0.2 node 1 of 2 rank 1 world 2 token ***") in said
    assert "python started for global ranks 1-1" in states(events, 1)[0]["reason"]
    assert json.loads((run_dir / "result.json").read_text())["state"] == "failed"


def test_a_command_runs_with_its_placeholders_and_its_exit_code_fails_the_node(supervisors, job_launch):
    node = job_launch(launcher="command", entrypoint="", master_port=free_port(), command=[
        "python", "-c", "import sys; print('node ${NODE_RANK} of ${NNODES} at ${MASTER_ADDR}:${MASTER_PORT}'); sys.exit(3)"])
    proc, _ = supervisors.start(node)
    assert proc.wait(timeout=40) == 1  # the supervisor of a failed node
    events = supervisors.events(node.job_id)
    [final] = final_states(events, 0)
    assert final["reason"] == "node rank 0: the command exited with code 3" and final["exit_code"] == 3
    assert f"node 0 of 1 at 127.0.0.1:{node.master_port}" in [e["line"] for e in lines(events)]


def test_a_stop_ends_a_plain_process_and_everything_it_started(supervisors, job_launch, plain_script):
    node = job_launch(launcher="none", entrypoint=plain_script, args=["run"], master_port=free_port(),
                       secret_env={"TOKEN": "x"})
    proc, _ = supervisors.start(node)
    supervisors.wait_for(node.job_id, lambda events: any(e["line"] == "tick" for e in lines(events)), timeout=30)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 143
    [final] = final_states(supervisors.events(node.job_id), 0)
    assert final["status"] == "stopped"
    assert wait_until_no_job_processes(node.job_id) == [] and job_processes(node.job_id) == []


def test_exit_codes_are_not_swallowed_by_a_shell(tmp_path):
    # The supervisor never runs a shell: a command item with shell syntax is one plain argument.
    from torchyard.supervisor.argv import build_command_argv

    launch = make_launch(launcher="command",
                         command=["python", "-c", "import sys; print(sys.argv[1:])", "; exit 5", "$(false)"])
    out = subprocess.run(build_command_argv(launch), capture_output=True, text=True, timeout=30)
    assert out.returncode == 0 and out.stdout.strip() == "['; exit 5', '$(false)']"
