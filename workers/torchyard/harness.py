"""The plugin harness (TransformerLab's `plugin_harness.py`): runs a TransformerLab-style plugin unmodified.

    python -m torchyard.harness --plugin_dir DIR [--entrypoint main.py] [--distributed_mode]
        [--accelerate_config '{"world_size": 2, ...}'] [--config_file config.json] [PLUGIN ARGS...]

With `--distributed_mode` it sets up HuggingFace Accelerate (process group from the environment
`accelerate launch` / torchrun gave this process; gloo on the CPU) and hands the `Accelerator` to the
plugin as `sys.modules['__main__'].accelerator` (a global of the plugin's script). It reads the
plugin's config (`--config_file`: a plain JSON object of settings, or Torchyard's job config with its
`hyperparameters` and `scaling`), applies the distributed adjustments of DESIGN.md section 7
(torchyard.sdk.scaling, `keep_global_batch` unless the job chose otherwise), adds the distributed
metadata (world size, rank, local rank, machines, master) and an `output_dir`: the main output
directory for global rank 0 only, a scratch folder of its own for every other rank. The adjusted
config goes to a file of this rank, which the plugin gets as `--config_file PATH` (the harness passes
its arguments on, as TransformerLab's does), and to `sys.modules['__main__'].config`. Then the
plugin's entrypoint runs as `__main__` (runpy), with the plugin directory first on sys.path.

TransformerLab's helpers are there too: `from plugin_sdk.distributed_utils import
is_distributed_training, get_accelerator, should_save_outputs, print_distributed_info` (its example
plugin's first line) finds Torchyard's answers (plugin_path/plugin_sdk), which read what the harness
set up, including TransformerLab's own variables DISTRIBUTED_TRAINING and IS_MAIN_PROCESS.

The plugin never imports Torchyard; the harness imports torch and accelerate only in distributed mode.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
import tempfile
from pathlib import Path
from typing import Any, TypedDict

from torchyard import protocol
from torchyard.plugin_manifest import ManifestError, read_manifest
from torchyard.sdk.scaling import adjust_hyperparameters

# The plugin's own config file, per rank, beside the job's run files (or in a temporary folder).
RANK_CONFIG = "plugin_config.rank{rank}.json"
# Set for the plugin, so code that never sees the accelerator can tell it runs distributed.
ENV_DISTRIBUTED_MODE = "TORCHYARD_DISTRIBUTED_MODE"
ENV_PLUGIN_CONFIG = "TORCHYARD_PLUGIN_CONFIG"
# TransformerLab's harness names the same two facts so, and its plugin_sdk.distributed_utils reads them.
ENV_TLAB_DISTRIBUTED, ENV_TLAB_MAIN = "DISTRIBUTED_TRAINING", "IS_MAIN_PROCESS"
# Holds `plugin_sdk` (TransformerLab's helpers, answered here): on the plugin's path after its own folder.
PLUGIN_PATH = Path(__file__).resolve().parent / "plugin_path"
# Torchyard's job config (RUN_DIR/config.json) has these sections; a plugin's own config is flat.
JOB_CONFIG_SECTIONS = ("hyperparameters", "scaling")
DEFAULT_SCALING = {"mode": "keep_global_batch"}


class HarnessError(Exception):
    """A plugin that cannot be run as asked (printed as one line, exit code 2)."""


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """The harness's own options; everything else is the plugin's (passed on as is)."""
    parser = argparse.ArgumentParser(prog="python -m torchyard.harness", allow_abbrev=False,
                                     description="Run a TransformerLab-style plugin, distributed with Accelerate.")
    parser.add_argument("--plugin_dir", required=True, help="the plugin's directory")
    parser.add_argument("--entrypoint", help="its script (default: the manifest's, else main.py)")
    parser.add_argument("--distributed_mode", action="store_true", help="set up Accelerate and hand it over")
    parser.add_argument("--accelerate_config", default="{}", help="JSON: the node's place in the job")
    parser.add_argument("--config_file", help="the plugin's config (JSON); adjusted, then passed on")
    return parser.parse_known_args(argv)


def plugin_script(plugin_dir: Path, entrypoint: str | None) -> Path:
    """The script to run: `entrypoint` (absolute, or relative to the plugin), else the manifest's."""
    if not plugin_dir.is_dir():
        raise HarnessError(f"--plugin_dir {plugin_dir}: not a directory")
    if entrypoint is None:
        try:
            entrypoint = read_manifest(plugin_dir, name=plugin_dir.name).entrypoint
        except ManifestError as exc:
            raise HarnessError(str(exc)) from None
    script = Path(entrypoint) if Path(entrypoint).is_absolute() else plugin_dir / entrypoint
    if not script.is_file():
        raise HarnessError(f"the plugin's entrypoint {entrypoint} is not a file of {plugin_dir}")
    return script


def load_json_object(text_or_path: str, what: str, *, is_path: bool) -> dict[str, Any]:
    try:
        data = json.loads(Path(text_or_path).read_text(encoding="utf-8") if is_path else text_or_path)
    except (OSError, ValueError) as exc:
        raise HarnessError(f"{what}: {exc}") from None
    if not isinstance(data, dict):
        raise HarnessError(f"{what}: not a JSON object")
    return data


def split_config(data: dict[str, Any], given_scaling: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the plugin's settings, the scaling rule): Torchyard's job config carries both; a plugin's own
    flat config is its settings, under the accelerate_config's scaling or DESIGN.md's default."""
    if any(section in data for section in JOB_CONFIG_SECTIONS):
        return dict(data.get("hyperparameters") or {}), dict(data.get("scaling") or given_scaling or DEFAULT_SCALING)
    return dict(data), dict(given_scaling or DEFAULT_SCALING)


class DistributedMeta(TypedDict):
    """This process's place in the job, as a plugin's config carries it."""

    world_size: int
    rank: int
    local_rank: int
    num_machines: int
    machine_rank: int
    master_addr: str
    master_port: int
    distributed: bool


def distributed_metadata(environ: dict[str, str] | os._Environ[str], node: dict[str, Any]) -> DistributedMeta:
    """This process's place in the job: its ranks from the environment torchrun (or accelerate's
    launcher) set, the machines and the master from the node's --accelerate_config. That config's
    `rank` (TransformerLab's: `{"world_size": 3, "rank": 0}`, the machine's place among the job's)
    stands in for what the environment does not say: the machine's rank, and the process's own where
    no launcher gave one (one process a machine, as that harness runs)."""

    def first(*values: Any, default: Any) -> Any:
        return next((value for value in values if value not in (None, "")), default)

    world = int(first(environ.get("WORLD_SIZE"), node.get("world_size"), default=1))
    return {
        "world_size": world,
        "rank": int(first(environ.get("RANK"), node.get("rank"), default=0)),
        "local_rank": int(first(environ.get("LOCAL_RANK"), default=0)),
        "num_machines": int(first(node.get("num_machines"), environ.get("NNODES"), default=1)),
        # GROUP_RANK: torchrun's name for the node's rank, in every worker's environment.
        "machine_rank": int(first(environ.get("GROUP_RANK"), node.get("machine_rank"), node.get("rank"),
                                  environ.get("NODE_RANK"), default=0)),
        "master_addr": str(first(environ.get("MASTER_ADDR"), node.get("main_process_ip"), default="127.0.0.1")),
        "master_port": int(first(environ.get("MASTER_PORT"), node.get("main_process_port"), default=0)),
        "distributed": world > 1,
    }


def adjusted_config(settings: dict[str, Any], scaling: dict[str, Any], meta: DistributedMeta,
                    output_dir: str) -> dict[str, Any]:
    """The plugin's config for this rank: the adjustments (DESIGN.md section 7), the metadata, its
    output directory and whether it is the process that saves. Raises HarnessError on a batch that
    does not divide over the world."""
    try:
        adjusted = adjust_hyperparameters(settings, scaling, meta["world_size"], meta["rank"])
    except ValueError as exc:
        raise HarnessError(f"the plugin's config: {exc}") from None
    main = meta["rank"] == 0
    return {**adjusted, **meta, "is_main_process": main, "should_save_outputs": main, "output_dir": output_dir}


def output_dir_for(settings: dict[str, Any], rank: int, scratch: Path) -> str:
    """Rank 0 writes to the main output directory (the plugin's `output_dir`, else Torchyard's
    $TORCHYARD_OUTPUT_DIR, whose files are collected); every other rank to a scratch folder of its own."""
    if rank == 0:
        return str(settings.get("output_dir") or os.environ.get(protocol.ENV_OUTPUT_DIR) or Path.cwd() / "outputs")
    return str(scratch / f"rank-{rank}-outputs")


def make_accelerator(environ: dict[str, str] | os._Environ[str]):
    """Accelerate's Accelerator for this process: gloo on the CPU when the job's backend is gloo or
    there is no GPU (ACCELERATE_USE_CPU, so an Accelerator the plugin makes itself agrees)."""
    import torch
    from accelerate import Accelerator

    cpu = environ.get(protocol.ENV_DIST_BACKEND) == "gloo" or not torch.cuda.is_available()
    if cpu:
        os.environ["ACCELERATE_USE_CPU"] = "true"
    return Accelerator(cpu=cpu)


def main(argv: list[str] | None = None) -> int:
    args, plugin_args = parse_args(sys.argv[1:] if argv is None else argv)
    if plugin_args[:1] == ["--"]:
        plugin_args = plugin_args[1:]
    try:
        script = plugin_script(Path(args.plugin_dir).resolve(), args.entrypoint)
        node = load_json_object(args.accelerate_config, "--accelerate_config", is_path=False)
        raw = load_json_object(args.config_file, f"--config_file {args.config_file}", is_path=True) if args.config_file else {}
    except HarnessError as exc:
        print(f"torchyard.harness: {exc}", file=sys.stderr)
        return 2
    settings, scaling = split_config(raw, node.get("scaling"))
    meta = distributed_metadata(os.environ, node)
    run_dir = os.environ.get(protocol.ENV_RUN_DIR)
    scratch = Path(run_dir) if run_dir else Path(tempfile.mkdtemp(prefix="torchyard-harness-"))
    output_dir = output_dir_for(settings, meta["rank"], scratch)
    try:
        config = adjusted_config(settings, scaling, meta, output_dir)
    except HarnessError as exc:
        print(f"torchyard.harness: {exc}", file=sys.stderr)
        return 2
    Path(output_dir).mkdir(parents=True, exist_ok=True)
    config_path = scratch / RANK_CONFIG.format(rank=meta["rank"])
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True), encoding="utf-8")
    os.environ[ENV_PLUGIN_CONFIG] = str(config_path)
    if meta["rank"] != 0:
        os.environ[protocol.ENV_OUTPUT_DIR] = output_dir  # only rank 0's outputs are the job's
    accelerator = None
    os.environ[ENV_TLAB_MAIN] = "true" if meta["rank"] == 0 else "false"
    if args.distributed_mode:
        os.environ[ENV_DISTRIBUTED_MODE] = "1"
        os.environ[ENV_TLAB_DISTRIBUTED] = "true"
        accelerator = make_accelerator(os.environ)
    # As `python main.py ...` would: its own folder first on the path, its name and arguments in argv;
    # then plugin_sdk, which TransformerLab's plugins import (a plugin's own copy comes first).
    sys.path[:0] = [str(script.parent), str(PLUGIN_PATH)]
    sys.argv = [str(script), *(["--config_file", str(config_path)] if args.config_file else []), *plugin_args]
    runpy.run_path(str(script), init_globals={"accelerator": accelerator, "config": config}, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
