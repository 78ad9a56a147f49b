"""JobSpecs from a file (`torchyard submit job.yaml`) or from `torchyard run`'s flags.

A spec file may name a project directory instead of an uploaded bundle, `code: {dir: "."}`, relative
to the spec file's own folder; the CLI packs and uploads it and sends `code: {bundle: <sha256>}`.
Everything else in the spec goes to the server as written: the server validates it field by field.

A Go scheduler task file (`name`, `required_gpus`, `min_gpu_memory`, `params`) is a JobSpec too,
once translated here (`task_spec`): one node with a rank per GPU; its params `model` and `dataset`
pick the built-in recipe and its data, the others are its hyperparameters. What the server refuses
of them it names as the file does (`in_file_terms`: params.momentum, not hyperparameters.momentum).
"""

from __future__ import annotations

import argparse
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

import yaml

from . import CliError
from .http import format_errors

MAX_NAME = 200  # the server's limit on a job name


# --- a JobSpec as this package writes one (`torchyard run`, torchyard.fn) --------------------------
# The fields the client sets, each optional; the server's JobSpec serializer checks them (and any
# other a spec file gives, which the CLI sends as written).
class CodeAsk(TypedDict):
    bundle: str  # sha256 of an uploaded bundle


class FunctionAsk(TypedDict, total=False):
    payload: str  # sha256 of the bundle holding the pickled function and its arguments
    name: str  # its qualified name
    python: str  # major.minor it was pickled on: only that Python can load it
    result_max_bytes: int


class ResourcesAsk(TypedDict, total=False):
    nodes: int | str  # a count, or an elastic range "MIN:MAX"
    procs_per_node: int
    gpus_per_node: int
    min_gpu_memory: int  # MB per GPU
    cpus_per_node: int  # whole cores
    memory_per_node: int  # bytes


class VolumeAsk(TypedDict, total=False):
    name: str
    mount_path: str
    access_mode: str  # ReadWriteMany (the server's default) or ReadWriteOnce
    size: int  # bytes free the job needs on it
    storage_class: str


class CheckpointingAsk(TypedDict, total=False):
    enabled: bool
    every_n_steps: int
    keep: int


class RuntimeAsk(TypedDict):
    pip: list[str]


class FaultToleranceAsk(TypedDict):
    max_restarts: int


class DistributedAsk(TypedDict):
    launcher: str


class PlacementAsk(TypedDict):
    labels: dict[str, str]


class JobSpecBody(TypedDict, total=False):
    name: str
    project: str
    entrypoint: str
    module: str
    args: list[str]
    code: CodeAsk
    function: FunctionAsk
    resources: ResourcesAsk
    env: dict[str, str]
    secret_env: dict[str, str]  # in clear on the way in: the server seals it
    runtime: RuntimeAsk
    fault_tolerance: FaultToleranceAsk
    checkpointing: CheckpointingAsk
    distributed: DistributedAsk
    framework: str
    volumes: list[VolumeAsk]
    placement: PlacementAsk
    priority: int | str  # an integer, or "low", "normal", "high"
    time_limit: int | str  # seconds, or "2h"


@dataclass
class LoadedSpec:
    """A spec read from a file; `code_dir` is the project to pack and upload, or None when the spec
    runs a built-in recipe or names an uploaded bundle itself."""

    spec: dict[str, Any]
    code_dir: Path | None
    notes: list[str] = field(default_factory=list)  # what the CLI says about the file before it submits
    # The spec's fields as the file named them, where it named them otherwise (a task's params).
    names: dict[str, str] = field(default_factory=dict)


def _parse(path: Path, text: str) -> Any:
    if path.suffix.lower() == ".json":
        try:
            return json.loads(text)
        except ValueError as exc:
            raise CliError(f"{path}: invalid JSON: {exc}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise CliError(f"{path}: invalid YAML{where}: {problem}") from None


def load_spec_file(path: Path) -> LoadedSpec:
    """Read a JobSpec from a YAML or JSON file (`.json` is parsed as JSON, anything else as YAML,
    which reads JSON too) and resolve its `code.dir` against the file's folder."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CliError(f"{path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise CliError(f"{path}: not a text file (expected YAML or JSON)") from None
    spec = _parse(path, text)
    if not isinstance(spec, dict):
        raise CliError(f"{path}: expected a JobSpec mapping (name, entrypoint, resources, ...), "
                       f"found {'nothing' if spec is None else type(spec).__name__}")
    notes: list[str] = []
    names: dict[str, str] = {}
    if is_task_file(spec):
        spec, notes, names = task_spec(spec, path)
    code = spec.get("code")
    if code is None:
        return LoadedSpec(spec, None, notes, names)
    if not isinstance(code, dict):
        raise CliError(f"{path}: code: expected a mapping such as {{dir: \".\"}} or {{bundle: <sha256>}}")
    if "dir" not in code:
        return LoadedSpec(spec, None, notes, names)
    if "bundle" in code:
        raise CliError(f"{path}: code: give either dir (a project to upload) or bundle, not both")
    if not isinstance(code["dir"], str) or not code["dir"]:
        raise CliError(f"{path}: code.dir: expected a directory path")
    code_dir = (path.parent / os.path.expanduser(code["dir"])).resolve()
    if not code_dir.is_dir():
        raise CliError(f"{path}: code.dir: {code_dir} is not a directory")
    # The rest of `code` is for the server; `dir` only means something here.
    spec = {**spec, "code": {k: v for k, v in code.items() if k != "dir"}}
    return LoadedSpec(spec, code_dir, notes, names)


# The Go scheduler's task file: {"name", "required_gpus", "min_gpu_memory", "params": {name: value}}.
TASK_KEYS = ("required_gpus", "min_gpu_memory", "params")
# What a task runs when it names nothing (the Go scheduler's worker only simulates training).
TASK_RECIPE = "examples/mlp_ddp.py"
# The params that pick a built-in recipe and its data, as a JobSpec's fields of those names do.
RECIPE_PARAMS = ("model", "dataset")
# The memory each GPU needs (MB) when `torchyard submit --gpus N` gives no --memory: the Go
# scheduler's submit tool's default.
DEFAULT_TASK_MEMORY = 4096
_INT = re.compile(r"^[+-]?[0-9]+$")
_FLOAT = re.compile(r"^[+-]?([0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)([eE][+-]?[0-9]+)?$")


def is_task_file(document: dict[str, Any]) -> bool:
    return any(key in document for key in TASK_KEYS)


def _param(value: Any) -> Any:
    """The seed's params are all strings ("64", "0.001"): numbers become numbers, so the job's
    config (sdk.config()) and its batch scaling see numbers; any other text stays as it is."""
    if isinstance(value, str):
        text = value.strip()
        if _INT.match(text):
            return int(text)
        if _FLOAT.match(text):
            return float(text)
    return value


def _count(path: Path, document: dict[str, Any], key: str, default: int, what: str) -> int:
    value = document.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CliError(f"{path}: {key}: expected {what} (a whole number, 0 or more), found {json.dumps(value, default=str)}")
    return value


def task_spec(task: dict[str, Any], path: Path) -> tuple[dict[str, Any], list[str], dict[str, str]]:
    """A Go scheduler task file as a JobSpec, a note for the user on what it runs, and the spec's
    fields as the file names them (for the server's errors: `in_file_terms`).

    One node (a task runs on one worker) with a rank per GPU: `required_gpus` GPUs (default 1, as
    the Go scheduler's submit tool) of at least `min_gpu_memory` MB each (default 0); `name` the
    job's name (default: the file's name). Of `params`, `model` and `dataset` pick the built-in
    recipe and its data (the JobSpec's model and dataset) and the others are its hyperparameters,
    which the recipe reads or the server refuses by name. Any JobSpec key beside them (entrypoint,
    args, placement, project, code, ...) goes to the server as written; with an entrypoint of the
    task's own, every param is a hyperparameter of its script (sdk.config()). A task that names
    neither runs the built-in recipe examples/mlp_ddp.py."""
    clashing = [key for key in ("resources", "hyperparameters") if key in task]
    if clashing:
        raise CliError(f"{path}: a Go scheduler task file gives required_gpus, min_gpu_memory and params; "
                       f"{' and '.join(clashing)} belong to a JobSpec: give one form or the other")
    name = task.get("name", path.stem)
    if not isinstance(name, str) or not name.strip():
        raise CliError(f"{path}: name: expected the task's name as text, found {json.dumps(name, default=str)}")
    gpus = _count(path, task, "required_gpus", 1, "the number of GPUs the task needs")
    memory = _count(path, task, "min_gpu_memory", 0, "the memory each GPU needs in MB")
    params = task.get("params", {})
    if not isinstance(params, dict):
        raise CliError(f"{path}: params: expected a mapping of names to values, such as "
                       f"{{\"batch_size\": \"64\"}}, found {json.dumps(params, default=str)}")
    spec = {key: value for key, value in task.items() if key not in (*TASK_KEYS, "name")}
    hyperparameters = {str(key): _param(value) for key, value in params.items()}
    spec.update({
        "name": name,
        "resources": {"nodes": 1, "procs_per_node": max(gpus, 1), "gpus_per_node": gpus, "min_gpu_memory": memory},
        "hyperparameters": hyperparameters,
    })
    names = {"hyperparameters": "params"}
    notes = []
    ranks = f"on {max(gpus, 1)} rank(s)"
    if not any(key in spec for key in ("entrypoint", "module", "function", *RECIPE_PARAMS)):
        picked = {key: hyperparameters.pop(key) for key in RECIPE_PARAMS if key in hyperparameters}
        if picked:
            spec.update(picked)
            names.update({key: f"params.{key}" for key in picked})
            what = " and ".join(f"{key} {value}" for key, value in picked.items())
            notes.append(f"{path}: a Go scheduler task: runs the built-in recipe for {what} {ranks}, its other "
                         "params as the recipe's hyperparameters (give entrypoint to run a script of your own)")
        else:
            spec["entrypoint"] = TASK_RECIPE
            notes.append(f"{path}: a Go scheduler task: runs the built-in recipe {TASK_RECIPE} {ranks} with its "
                         "params as hyperparameters (give entrypoint to run a script of your own)")
    return spec, notes, names


def in_file_terms(error: CliError, names: dict[str, str]) -> CliError:
    """The server's refusal with its fields named as the submitted file names them (`names`: spec
    field -> the file's); the error as it is when there is nothing to rename."""
    if not names or not isinstance(error.errors, dict) or not set(error.errors) & set(names):
        return error
    renamed = {names.get(key, key): value for key, value in error.errors.items()}
    return CliError(f"{error.heading}\n{format_errors(renamed)}", heading=error.heading, errors=renamed)


def parse_env(pairs: list[str]) -> dict[str, str]:
    """`--env KEY=VALUE` flags as a mapping (the value may hold '=' itself)."""
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise CliError(f"--env {pair}: expected KEY=VALUE")
        env[key] = value
    return env


def secret_env_from(names: list[str], environ: dict[str, str]) -> dict[str, str]:
    """`--secret-env NAME` flags as a mapping, each value read from this shell's environment: a
    secret given on the command line would stay in the shell's history and in `ps` output."""
    secrets = {}
    for name in names:
        if not name or "=" in name:
            raise CliError(f"--secret-env {name.partition('=')[0]}=...: give only the name; the value is read "
                           "from your environment (export it first)")
        if name not in environ:
            raise CliError(f"--secret-env {name}: {name} is not set in your environment")
        secrets[name] = environ[name]
    return secrets


def entrypoint_in(directory: Path, script: str, cwd: Path) -> str:
    """The script `torchyard run` was given, as a path inside the project directory (the bundle's
    root). It is read relative to the current directory first, as a shell user means it, then
    relative to the project directory."""
    root = Path(os.path.abspath(directory))
    for candidate in (Path(os.path.abspath(cwd / script)), Path(os.path.abspath(root / script))):
        if candidate.is_file() and candidate.is_relative_to(root):
            return candidate.relative_to(root).as_posix()
    raise CliError(f"{script}: no such file in the project directory {root}")


def nnodes_arg(text: str) -> int | str:
    """`--nnodes` as torchrun takes it: a count ("2" -> 2) or an elastic range MIN:MAX ("2:4", kept as
    the string the JobSpec's resources.nodes takes). The server checks the numbers (MIN >= 1, MIN <= MAX)."""
    low, sep, high = text.strip().partition(":")
    if low.isdigit() and (not sep or high.isdigit()):
        return f"{int(low)}:{int(high)}" if sep else int(low)
    raise argparse.ArgumentTypeError(f"{text!r}: a machine count (2) or a range MIN:MAX (2:4)")


def run_spec(*, target: str, module: bool, args: list[str], directory: Path, nnodes: int | str,
             nproc_per_node: int, gpus_per_node: int | None = None, name: str | None = None,
             env: dict[str, str] | None = None, secret_env: dict[str, str] | None = None,
             pip: list[str] | None = None, max_restarts: int | None = None,
             project: str | None = None, volumes: list[str] | None = None,
             launcher: str | None = None, framework: str | None = None) -> JobSpecBody:
    """The JobSpec of `torchyard run`, without its `code` (set once the bundle is uploaded).
    `target` is the entrypoint (a path inside `directory`) or, with `module`, a module name.
    `framework` "ray": a Ray cluster over the nodes, the script its driver on node 0."""
    resources: ResourcesAsk = {"nodes": nnodes, "procs_per_node": nproc_per_node}
    if gpus_per_node is not None:
        resources["gpus_per_node"] = gpus_per_node
    spec: JobSpecBody = {"name": name or f"{target} ({Path(os.path.abspath(directory)).name or '/'})"[:MAX_NAME]}
    if module:
        spec["module"] = target
    else:
        spec["entrypoint"] = target
    spec["args"] = list(args)
    spec["resources"] = resources
    if env:
        spec["env"] = dict(env)
    if secret_env:
        spec["secret_env"] = dict(secret_env)
    if project:
        spec["project"] = project
    if pip:
        spec["runtime"] = {"pip": list(pip)}
    if max_restarts is not None:
        spec["fault_tolerance"] = {"max_restarts": max_restarts}
    if launcher and launcher != "torchrun":
        spec["distributed"] = {"launcher": launcher}
    if framework and framework != "pytorch":
        spec["framework"] = framework
    if volumes:
        spec["volumes"] = [volume_request(text) for text in volumes]
    return spec


def volume_request(text: str) -> VolumeAsk:
    """`--volume NAME[:MOUNT_PATH][:ACCESS_MODE]` as a JobSpec volume: shared-data:/data,
    scratch:scratch:ReadWriteOnce. The server checks the values."""
    name, _, rest = text.partition(":")
    volume: VolumeAsk = {"name": name}
    mount_path, _, access_mode = rest.rpartition(":") if rest.endswith(("ReadWriteOnce", "ReadWriteMany")) \
        else (rest, "", "")
    if mount_path:
        volume["mount_path"] = mount_path
    if access_mode:
        volume["access_mode"] = access_mode
    return volume
