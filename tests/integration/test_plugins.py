"""TransformerLab's promise on the real stack: an existing TransformerLab-style plugin (it takes its
`accelerator` from __main__, uses TransformerLab's plugin_sdk.distributed_utils and never imports
Torchyard) is pushed with the CLI and runs on 2 nodes
through the seed's plan -> queue_distributed flow under `accelerate launch`; its rank-0 output comes
back, every rank's lines are logged, and a run that loses a rank recovers and then stops cleanly."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from .test_bring_your_own_code import run_cli

FINAL = {"completed", "failed", "stopped"}

PLUGIN = """\
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist

from plugin_sdk.distributed_utils import (  # TransformerLab's helpers, as its example plugin imports them
    get_accelerator,
    is_distributed_training,
    print_distributed_info,
    should_save_outputs,
)

accelerator = sys.modules["__main__"].accelerator  # what the plugin harness hands over
assert is_distributed_training() and get_accelerator() is accelerator
print_distributed_info()
parser = argparse.ArgumentParser()
parser.add_argument("--config_file", required=True)
parser.add_argument("--sleep", type=float, default=0.0)
args, _ = parser.parse_known_args()
with open(args.config_file) as f:
    config = json.load(f)

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"])
model, optimizer = accelerator.prepare(model, optimizer)
for step in range(config["steps"]):
    loss = model(torch.randn(config["batch_size"], 4)).pow(2).mean()
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    print(f"step {step} loss {loss.item():.4f}", flush=True)
    time.sleep(args.sleep)
total = accelerator.reduce(torch.tensor([float(accelerator.process_index + 1)]), "sum")
print(f"rank {accelerator.process_index} of {accelerator.num_processes} on {dist.get_backend()}: "
      f"batch_size {config['batch_size']} sum {total.item():g}", flush=True)
if should_save_outputs():
    os.makedirs(config["output_dir"], exist_ok=True)
    with open(os.path.join(config["output_dir"], "result.json"), "w") as f:
        json.dump({key: config[key] for key in ("world_size", "rank", "batch_size", "global_batch_size")}, f)
accelerator.wait_for_everyone()
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def plugin(pg_stack, tmp_path_factory) -> str:
    directory: Path = tmp_path_factory.mktemp("tiny_trainer")
    (directory / "main.py").write_text(PLUGIN)
    (directory / "index.json").write_text(json.dumps({  # TransformerLab's manifest, as the plugin has it
        "name": "Tiny trainer", "uniqueId": "tiny_trainer", "version": "0.3.0", "type": "trainer",
        "description": "a few SGD steps", "parameters": {
            "batch_size": {"type": "integer", "default": 8}, "lr": {"type": "number", "default": 0.1},
            "steps": {"type": "integer", "default": 3}}}))
    pushed = run_cli(pg_stack, "plugin", "push", str(directory), cwd=directory)
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr
    assert "plugin tiny_trainer 0.3.0 registered" in pushed.stdout
    return "tiny_trainer"


def plan_and_queue(stack, body: dict) -> int:
    """The seed's UI flow: plan, then queue the plan's job_id; Torchyard's job id."""
    planned = stack.api("POST", "/api/network/distributed/plan", json=body)
    assert planned.status_code == 200, planned.text
    assert planned.json()["execution_plan"]["launcher"] == "accelerate"
    queued = stack.api("GET", f"/api/tasks/{planned.json()['job_id']}/queue_distributed")
    assert queued.status_code == 201, queued.text
    return queued.json()["job_id"]


def test_a_transformerlab_plugin_runs_on_two_nodes_and_its_rank_0_output_comes_back(pg_stack, plugin, tmp_path):
    job_id = plan_and_queue(pg_stack, {"plugin_name": plugin, "resource_requirements": {"num_machines": 2}})
    done = pg_stack.wait_job(job_id, FINAL, timeout=180)
    assert done["status"] == "completed", pg_stack.job_log_tail(job_id, 60)
    assert sorted(n["machine_name"] for n in done["plan"]["nodes"]) == ["local-0", "local-1"]

    lines = {(e["rank"], e["line"]) for e in pg_stack.logs(job_id)}
    # Each rank's own lines, tagged with its global rank: gloo across the nodes, the batch divided.
    for rank in (0, 1):
        assert (rank, f"rank {rank} of 2 on gloo: batch_size 4 sum 3") in lines, sorted(lines)[-40:]
    # plugin_sdk.distributed_utils answered from the harness: the job's shape, printed by rank 0 alone.
    assert {(rank, line) for rank, line in lines if "World size" in line} == {(0, "  - World size: 2")}

    artifacts = pg_stack.api("GET", f"/api/jobs/{job_id}/artifacts").json()
    assert [(a["node_rank"], a["path"]) for a in artifacts] == [(0, "result.json")]
    body = pg_stack.api("GET", f"/api/network/local_job_file/{job_id}/result.json").json()
    assert body == {"world_size": 2, "rank": 0, "batch_size": 4, "global_batch_size": 8}

    # A directory with neither manifest is refused before anything is sent, naming what is missing.
    empty = tmp_path / "not_a_plugin"
    empty.mkdir()
    refused = run_cli(pg_stack, "plugin", "push", str(empty), cwd=tmp_path)
    assert refused.returncode == 2 and "no torchyard-plugin.json" in refused.stderr and "--name" in refused.stderr


def test_a_plugin_run_that_loses_a_rank_recovers_and_then_stops_leaving_nothing(pg_stack, plugin):
    job_id = plan_and_queue(pg_stack, {"plugin_name": plugin, "config": {"steps": 2000}, "args": ["--sleep", "0.05"],
                                       "resource_requirements": {"num_machines": 2},
                                       "project": "default"})
    pg_stack.wait_job(job_id, {"running"}, timeout=120)
    deadline = time.monotonic() + 60
    while not any(e["line"].startswith("step 3 ") for e in pg_stack.logs(job_id) if e["rank"] == 1):
        assert time.monotonic() < deadline, pg_stack.job_log_tail(job_id, 60)
        time.sleep(0.5)
    ranks = [p for p in pg_stack.job_processes(job_id)
             if p.environ().get("TORCHYARD_NODE_RANK") == "1" and "torchyard.harness" in " ".join(p.cmdline())
             and "accelerate.commands.launch" not in " ".join(p.cmdline())]
    assert len(ranks) == 1, [p.cmdline() for p in pg_stack.job_processes(job_id)]
    ranks[0].kill()

    deadline = time.monotonic() + 120
    while (job := pg_stack.job(job_id))["attempt"] < 1 or job["status"] != "running":
        assert job["status"] not in FINAL and time.monotonic() < deadline, pg_stack.job_log_tail(job_id, 60)
        time.sleep(0.5)
    stopped = pg_stack.api("POST", f"/api/network/distributed/stop/{job_id}")
    assert stopped.status_code == 200, stopped.text
    assert pg_stack.wait_job(job_id, FINAL, timeout=60)["status"] == "stopped"
    assert pg_stack.wait_no_job_processes(job_id) == []


def test_plugin_rm_removes_it_and_a_plan_naming_it_is_refused_after(pg_stack, plugin, tmp_path):
    # The module's last test: the others run the plugin.
    removed = run_cli(pg_stack, "plugin", "rm", plugin, cwd=tmp_path)
    assert removed.returncode == 0 and f"plugin {plugin} of project default removed" in removed.stdout, removed.stderr
    again = run_cli(pg_stack, "plugin", "rm", plugin, cwd=tmp_path)
    assert again.returncode == 2 and f"no registered plugin named {plugin!r}" in again.stderr
    planned = pg_stack.api("POST", "/api/network/distributed/plan",
                           json={"plugin_name": plugin, "resource_requirements": {"num_machines": 2}})
    assert planned.status_code == 400 and f"unknown plugin {plugin!r}" in planned.json()["plugin_name"][0]
