"""What a node runs (supervisor/commands.py `node_command`): the command each launcher gets, the
environment and log files it is given, and what the node's log says of it; the plain launchers'
commands run here as the child processes they are."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from launches import make_launch
from supervisor_support import next_job_id, stream_events
from torchyard.supervisor.argv import EntrypointError
from torchyard.supervisor.commands import Command, node_command
from torchyard.supervisor.output_pump import OutputPump
from torchyard.supervisor.publisher import EventPublisher, connect
from torchyard.supervisor.ranks import RankProcesses
from torchyard.supervisor.tail import RankLogTailer
from torchyard.supervisor.warm_launch import PLAN_FILE

# Says what a plain rank sees: its argv and the variables the node gives it.
SHOWS_ITS_WORLD = """
import json, os, sys
names = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "TORCHYARD_JOB_ID", "TORCHYARD_NODE_RANK",
         "GLOO_SOCKET_IFNAME", "TORCHYARD_FUNCTION", "TORCHYARD_VOLUME_SHARED_DATA")
print(json.dumps({"argv": sys.argv[1:], **{name: os.environ.get(name) for name in names}}))
print("a line to stderr", file=sys.stderr)
"""


class Node:
    """One node's run directory, working directory and pump, publishing to a real Redis."""

    def __init__(self, tmp_path: Path, redis_url: str, **launch) -> None:
        self.launch = make_launch(job_id=next_job_id(), **launch)
        self.run_dir, self.workdir = tmp_path / "run", tmp_path / "work"
        self.run_dir.mkdir()
        self.workdir.mkdir()
        self.publisher = EventPublisher(self.launch, connect(redis_url))
        self.pump = OutputPump(self.publisher, lambda line: line, rank_start=self.launch.rank_start, keep=10,
                               on_torchrun_line=lambda line: None, on_step=lambda *step: None)
        self.redis_url = redis_url

    def command(self, *, script: Path | None = None, warm_pool: Path | None = None, function_env=None,
                interface_env=None) -> Command:
        return node_command(self.launch, self.run_dir, self.workdir, self.pump, python=sys.executable, script=script,
                            warm_pool=warm_pool, cold_because="no warm pool of this Python",
                            function_env=function_env or {}, interface_env=interface_env or {})

    def said(self) -> list[str]:
        assert self.publisher.flush(budget_s=5)
        return [e["line"] for e in stream_events(self.redis_url, self.launch.job_id) if e["source"] == "supervisor"]

    def run(self, command: Command) -> int:
        ranks = RankProcesses(command, self.workdir)
        ranks.wait(30)
        code = ranks.poll()
        assert code is not None, "the node's process did not end"
        return code


def test_a_cold_node_runs_torchrun_over_its_ranks_with_one_log_of_its_own_and_says_why_it_is_cold(tmp_path, redis_url):
    node = Node(tmp_path, redis_url, nproc_per_node=2)
    script = tmp_path / "work" / "train.py"
    command = node.command(script=script)
    assert command.argv[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert command.argv[command.argv.index("--nproc-per-node") + 1] == "2"
    assert command.argv[command.argv.index("--node-rank") + 1] == "1"
    assert str(script) in command.argv
    assert (command.stdout, command.stderr, command.what) == (node.run_dir / "torchrun.log", None, "torchrun")
    assert command.env["TORCHYARD_JOB_ID"] == str(node.launch.job_id) and "RANK" not in command.env
    assert node.said() == ["cold start (torchrun): no warm pool of this Python"]


def test_a_warm_node_runs_the_warm_launcher_on_a_plan_it_wrote_and_knows_where_its_ranks_pids_go(tmp_path, redis_url):
    node = Node(tmp_path, redis_url, nproc_per_node=2)
    command = node.command(script=tmp_path / "work" / "train.py", warm_pool=tmp_path / "pool.sock")
    plan = json.loads((node.run_dir / PLAN_FILE).read_text())
    assert (plan["socket"], plan["nproc"], plan["rank_start"], plan["binary"]) == (
        str(tmp_path / "pool.sock"), 2, 2, sys.executable)
    assert command.argv[-1] == str(node.run_dir / PLAN_FILE) and command.what == "the warm launcher"
    assert command.warm_pids_file == Path(plan["log_dir"]) / "pids.json" and command.torchrun_like
    assert node.said() == [f"warm start: 2 rank(s) forked from the warm pool of {sys.executable} (torch already imported)"]


def test_a_plain_process_gets_the_nodes_world_and_writes_where_the_rank_tailer_reads(tmp_path, redis_url):
    node = Node(tmp_path, redis_url, launcher="none", args=["--lr", "0.1"],
                volumes=[{"name": "shared-data", "path": str(tmp_path), "mount_path": "data"}])
    script = tmp_path / "work" / "main.py"
    script.write_text(SHOWS_ITS_WORLD)
    tailer = RankLogTailer(node.run_dir / "torchrun", 1)
    command = node.command(script=script, function_env={"TORCHYARD_FUNCTION": "payload"},
                           interface_env={"GLOO_SOCKET_IFNAME": "lo"})
    assert command.what == "python" and not command.torchrun_like

    assert node.run(command) == 0
    lines = tailer.poll(final=True)
    assert [(line.local_rank, line.stream) for line in lines] == [(0, "stderr"), (0, "stdout")]
    assert lines[0].line == "a line to stderr"
    # One process per node stands for the node: its rank is the node's, its world the node count.
    assert json.loads(lines[1].line) == {
        "argv": ["--lr", "0.1"], "RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "10.0.0.5",
        "TORCHYARD_JOB_ID": str(node.launch.job_id), "TORCHYARD_NODE_RANK": "1", "GLOO_SOCKET_IFNAME": "lo",
        "TORCHYARD_FUNCTION": "payload", "TORCHYARD_VOLUME_SHARED_DATA": str(tmp_path)}
    assert node.said() == ["ranks reach the master 10.0.0.5 through GLOO_SOCKET_IFNAME=lo"]


def test_a_command_runs_with_its_placeholders_filled_through_no_shell_and_keeps_its_exit_code(tmp_path, redis_url):
    node = Node(tmp_path, redis_url, launcher="command",
                command=["python", "-c", "import sys; print(sys.argv[1:]); sys.exit(4)", "${NODE_RANK}/${NNODES}",
                         "$(false); exit 5"])
    command = node.command()
    assert command.argv[0] == sys.executable and command.what == "the command"
    assert node.run(command) == 4
    assert command.stdout.read_text() == "['1/2', '$(false); exit 5']\n"
    assert command.stdout.parent == command.stderr.parent == node.run_dir / "torchrun" / (
        f"torchyard-{node.launch.job_id}-2_command") / "attempt_0" / "0"


def test_accelerate_without_an_entrypoint_script_is_refused(tmp_path, redis_url):
    node = Node(tmp_path, redis_url, launcher="accelerate", module="trainer")
    with pytest.raises(EntrypointError, match="launcher accelerate runs an entrypoint script"):
        node.command(script=None)
