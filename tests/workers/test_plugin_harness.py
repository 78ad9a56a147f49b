"""TransformerLab's plugins on the machine side: the manifest a push reads (ours, or TransformerLab's
index.json), `launcher: accelerate`'s pure argv and environment, and the harness's config for each
rank (DESIGN.md section 7's adjustments, the metadata, rank 0 alone on the main output directory)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from launches import make_launch
from torchyard.harness import (
    HarnessError,
    adjusted_config,
    distributed_metadata,
    output_dir_for,
    split_config,
)
from torchyard.plugin_manifest import ManifestError, read_manifest
from torchyard.protocol import NodeLaunch
from torchyard.supervisor.accelerate_launch import accelerate_env, build_accelerate_argv
from torchyard.supervisor.argv import build_launcher_env, runs_torchrun


def launch(**overrides) -> NodeLaunch:
    """Node 1 of 2 of job 7's attempt 1 under launcher accelerate, two processes a node."""
    return make_launch(**{"attempt": 1, "nproc_per_node": 2, "entrypoint": "main.py", "args": ["--epochs", "1"],
                          "launcher": "accelerate", **overrides})


def test_a_node_runs_accelerate_launch_on_the_harness_with_torchruns_promises(tmp_path):
    argv = build_accelerate_argv(launch(), tmp_path / "run", tmp_path / "work", tmp_path / "work" / "main.py",
                                 python="/venv/bin/python")
    assert argv[:3] == ["/venv/bin/python", "-m", "accelerate.commands.launch"]
    flags = dict(zip(argv[3:], argv[4:], strict=False))
    assert (flags["--num_machines"], flags["--machine_rank"], flags["--num_processes"]) == ("2", "1", "4")
    assert (flags["--main_process_ip"], flags["--main_process_port"], flags["--max_restarts"]) == ("10.0.0.5", "29400", "0")
    assert flags["--log_dir"] == str(tmp_path / "run" / "torchrun") and "--multi_gpu" in argv
    harness = argv[argv.index("torchyard.harness") + 1:]
    assert harness[:4] == ["--plugin_dir", str(tmp_path / "work"), "--entrypoint", str(tmp_path / "work" / "main.py")]
    assert json.loads(harness[harness.index("--accelerate_config") + 1])["machine_rank"] == 1
    assert harness[-4:] == ["--config_file", str(tmp_path / "run" / "config.json"), "--epochs", "1"]
    assert accelerate_env(launch(backend="gloo")) == {"PET_REDIRECTS": "3", "PET_RDZV_ID": "torchyard-7-1",
                                                      "ACCELERATE_USE_CPU": "true"}
    # torchrun inside sets each rank's RANK; the node does not pretend to be one.
    assert runs_torchrun(launch()) and "RANK" not in build_launcher_env(launch(), {})


def test_one_process_in_all_is_accelerates_simple_launch():
    alone = launch(node_rank=0, nnodes=1, nproc_per_node=1, world_size=1)
    argv = build_accelerate_argv(alone, Path("/r"), Path("/w"), Path("/w/main.py"), python="python")
    assert "--multi_gpu" not in argv and not runs_torchrun(alone)
    assert build_launcher_env(alone, {})["RANK"] == "0"


def test_manifests_ours_transformerlabs_and_none_with_a_name(tmp_path):
    (tmp_path / "main.py").write_text("")
    (tmp_path / "index.json").write_text(json.dumps({
        "name": "Llama Trainer", "uniqueId": "llama_trainer", "version": "0.1.2", "description": "LoRA",
        "parameters": {"learning_rate": {"type": "number", "default": 0.0005}, "note": {"type": "string"}}}))
    theirs = read_manifest(tmp_path)
    assert (theirs.name, theirs.version, theirs.entrypoint) == ("llama_trainer", "0.1.2", "main.py")
    assert theirs.default_config == {"learning_rate": 0.0005}
    (tmp_path / "torchyard-plugin.json").write_text(json.dumps({"name": "mine", "version": "2.0"}))
    assert read_manifest(tmp_path).name == "mine" and read_manifest(tmp_path, name="renamed").name == "renamed"
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "main.py").write_text("")
    assert read_manifest(bare, name="bare_plugin").entrypoint == "main.py"


@pytest.mark.parametrize(("manifest", "words"), [
    (None, "no torchyard-plugin.json"),
    ("{not json", "not valid JSON"),
    ({"version": "1"}, "name: required"),
    ({"name": "x y"}, "name: 'x y' is not a plugin name"),
    ({"name": "p", "entrypoint": "/etc/passwd.py"}, "entrypoint:"),
    ({"name": "p", "entrypoint": "train.py"}, "entrypoint: train.py is not a file"),
    ({"name": "p", "default_config": [1]}, "default_config: must be a JSON object"),
    ({"name": "p", "version": 2}, "version: must be a string"),
    ({"name": "p", "script": "main.py"}, "script: unknown field"),
])
def test_a_missing_or_invalid_manifest_names_the_field(tmp_path, manifest, words):
    (tmp_path / "main.py").write_text("")
    if manifest is not None:
        text = manifest if isinstance(manifest, str) else json.dumps(manifest)
        (tmp_path / "torchyard-plugin.json").write_text(text)
    with pytest.raises(ManifestError, match=words):
        read_manifest(tmp_path)


def test_each_rank_gets_the_adjusted_config_and_only_rank_0_the_main_output_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHYARD_OUTPUT_DIR", str(tmp_path / "outputs"))
    job_config = {"hyperparameters": {"batch_size": 64, "lr": 0.001}, "scaling": {"mode": "keep_global_batch"}}
    settings, scaling = split_config(job_config, None)
    env = {"WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1", "GROUP_RANK": "1", "MASTER_ADDR": "10.0.0.5",
           "MASTER_PORT": "29400"}
    meta = distributed_metadata(env, {"num_machines": 2, "machine_rank": 1})
    config = adjusted_config(settings, scaling, meta, output_dir_for(settings, meta["rank"], tmp_path))
    assert (config["batch_size"], config["global_batch_size"], config["lr"]) == (16, 64, 0.001)
    assert (config["world_size"], config["rank"], config["local_rank"], config["machine_rank"]) == (4, 3, 1, 1)
    assert config["output_dir"] == str(tmp_path / "rank-3-outputs") and config["should_save_outputs"] is False
    assert output_dir_for(settings, 0, tmp_path) == str(tmp_path / "outputs")
    # A plugin's own flat config takes DESIGN.md's default rule; a batch that does not divide is refused.
    flat, rule = split_config({"batch_size": 10}, None)
    with pytest.raises(HarnessError, match="does not divide evenly"):
        adjusted_config(flat, rule, meta, str(tmp_path))


# TransformerLab's example plugin's first lines, as its document writes them.
USES_PLUGIN_SDK = """\
import logging
from plugin_sdk.distributed_utils import (
    is_distributed_training,
    get_accelerator,
    should_save_outputs,
    print_distributed_info
)
from plugin_sdk.distributed_utils import get_rank, get_world_size, get_local_rank, setup_distributed_logging

log = logging.getLogger("plugin")
setup_distributed_logging(log)
print_distributed_info()
print("facts", is_distributed_training(), get_accelerator(), should_save_outputs(), get_rank(), get_world_size(),
      get_local_rank(), logging.getLevelName(log.level), flush=True)
"""


def run_harness(plugin_dir: Path, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "IS_MAIN_PROCESS")}
    return subprocess.run([sys.executable, "-m", "torchyard.harness", "--plugin_dir", str(plugin_dir)],
                          env={**environ, **env}, capture_output=True, text=True, timeout=60)


def test_transformerlabs_plugin_sdk_is_on_the_plugins_path_and_answers_from_the_harness(tmp_path):
    (tmp_path / "main.py").write_text(USES_PLUGIN_SDK)
    (tmp_path / "index.json").write_text(json.dumps({"name": "Example", "uniqueId": "example", "version": "1"}))
    rank_1 = run_harness(tmp_path, RANK="1", WORLD_SIZE="2", LOCAL_RANK="1", TORCHYARD_RUN_DIR=str(tmp_path))
    assert rank_1.returncode == 0, rank_1.stderr
    # Not the main process: it prints no info, saves nothing, and its logger is quiet below warnings.
    assert rank_1.stdout.splitlines() == ["facts False None False 1 2 1 WARNING"]
    alone = run_harness(tmp_path)
    assert alone.returncode == 0, alone.stderr
    assert alone.stdout.splitlines() == [
        "Distributed Training Information:", "  - World size: 1", "  - Current rank: 0", "  - Local rank: 0",
        "  - Is main process: True", "facts False None True 0 1 0 NOTSET"]


def test_a_plugin_that_ships_its_own_plugin_sdk_keeps_it(tmp_path):
    (tmp_path / "plugin_sdk").mkdir()
    (tmp_path / "plugin_sdk" / "__init__.py").write_text("")
    (tmp_path / "plugin_sdk" / "distributed_utils.py").write_text("def is_distributed_training():\n    return 'own'\n")
    (tmp_path / "main.py").write_text("from plugin_sdk.distributed_utils import is_distributed_training\n"
                                      "print(is_distributed_training())\n")
    (tmp_path / "index.json").write_text(json.dumps({"name": "Own", "uniqueId": "own", "version": "1"}))
    ran = run_harness(tmp_path)
    assert (ran.returncode, ran.stdout) == (0, "own\n"), ran.stderr


def test_the_rank_of_transformerlabs_accelerate_config_places_the_machine_and_a_process_no_launcher_placed():
    node = {"world_size": 3, "rank": 2}  # the seed's --accelerate_config for its third machine
    alone = distributed_metadata({}, node)
    assert (alone["world_size"], alone["rank"], alone["machine_rank"], alone["distributed"]) == (3, 2, 2, True)
    # Under a launcher its variables say where the process is; the config's rank still names the machine.
    launched = distributed_metadata({"WORLD_SIZE": "6", "RANK": "5", "LOCAL_RANK": "1"}, node)
    assert (launched["world_size"], launched["rank"], launched["machine_rank"]) == (6, 5, 2)
