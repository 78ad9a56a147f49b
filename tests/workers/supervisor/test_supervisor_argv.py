"""The pure builders: torchrun argv, the environment of launched processes, entrypoint resolution."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from launches import make_launch
from torchyard import protocol
from torchyard.protocol import NodeLaunch
from torchyard.supervisor.argv import (
    MAX_SOCKET_PATH_BYTES,
    PACKAGE_PARENT,
    EntrypointError,
    build_env,
    build_torchrun_argv,
    default_code_root,
    event_socket_path,
    link_sdk,
    resolve_entrypoint,
)


def launch(**overrides) -> NodeLaunch:
    """Node 1 of 2 of job 7, four ranks a node, resuming from a checkpoint, its env trying to mask ours."""
    return make_launch(**{
        "nproc_per_node": 4,
        "entrypoint": "examples/mlp_ddp.py",
        "args": ["--epochs", "3", "--name", "two words; rm -rf /"],
        "env": {"MY_FLAG": "1", "TORCHYARD_JOB_ID": "999"},
        "config": {"hyperparameters": {"lr": 0.1}},
        "checkpoint_url": "file:///ckpt/job-7",
        "resume_manifest": "file:///ckpt/job-7/step-100/manifest.json",
        "backend": "gloo",
        **overrides,
    })


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_argv_is_a_list_of_strings_starting_torchrun_with_the_current_python():
    argv = build_torchrun_argv(launch(), Path("/runs/a"), Path("/code/examples/mlp_ddp.py"))
    assert all(isinstance(part, str) for part in argv)
    assert argv[:3] == [sys.executable, "-m", "torch.distributed.run"]


def test_argv_names_the_topology_and_leaves_restarts_to_the_controller():
    argv = build_torchrun_argv(launch(), Path("/runs/a"), Path("/code/examples/mlp_ddp.py"))
    assert flag(argv, "--nnodes") == "2"
    assert flag(argv, "--nproc-per-node") == "4"
    assert flag(argv, "--node-rank") == "1"
    assert flag(argv, "--master-addr") == "10.0.0.5"
    assert flag(argv, "--master-port") == "29400"
    assert flag(argv, "--max-restarts") == "0"
    assert flag(argv, "--log-dir") == "/runs/a/torchrun"
    assert flag(argv, "--redirects") == "3"
    assert "--tee" not in argv


def test_argv_ends_with_the_script_and_its_arguments_untouched():
    argv = build_torchrun_argv(launch(), Path("/runs/a"), Path("/code/examples/mlp_ddp.py"))
    assert argv[-5:] == ["/code/examples/mlp_ddp.py", "--epochs", "3", "--name", "two words; rm -rf /"]


def test_env_carries_the_user_env_and_every_torchyard_variable():
    env = build_env(launch(), Path("/runs/a"), {"PATH": "/usr/bin", "HOME": "/root"})
    assert env["PATH"] == "/usr/bin"
    assert env["MY_FLAG"] == "1"
    assert env[protocol.ENV_JOB_ID] == "7"
    assert env[protocol.ENV_ATTEMPT] == "2"
    assert env[protocol.ENV_NODE_RANK] == "1"
    assert env[protocol.ENV_EVENT_SOCKET] == "/runs/a/events.sock"
    assert env[protocol.ENV_CONFIG] == "/runs/a/config.json"
    assert env[protocol.ENV_CHECKPOINT_URL] == "file:///ckpt/job-7"
    assert env[protocol.ENV_RESUME_MANIFEST] == "file:///ckpt/job-7/step-100/manifest.json"
    assert env[protocol.ENV_DIST_BACKEND] == "gloo"
    assert env["PYTHONUNBUFFERED"] == "1"


def test_ranks_print_their_python_stacks_when_a_signal_kills_them_unless_the_launch_says_not():
    assert build_env(launch(), Path("/runs/a"), {})["PYTHONFAULTHANDLER"] == "1"
    assert build_env(launch(env={"PYTHONFAULTHANDLER": ""}), Path("/runs/a"), {})["PYTHONFAULTHANDLER"] == ""


def test_the_user_env_cannot_mask_the_job_identity_strays_are_found_by():
    env = build_env(launch(), Path("/runs/a"), {})
    assert env[protocol.ENV_JOB_ID] == "7"


def test_env_puts_only_the_torchyard_package_on_the_path_once(tmp_path):
    sdk = "/runs/a/pythonpath"
    env = build_env(launch(), Path("/runs/a"), {"PYTHONPATH": f"/extra:{sdk}"})
    assert env["PYTHONPATH"] == f"/extra:{sdk}"
    env = build_env(launch(), Path("/runs/a"), {"PYTHONPATH": "/extra"})
    assert env["PYTHONPATH"] == f"{sdk}:/extra"
    # The folder holds the package and nothing else the agent's environment has.
    folder = link_sdk(tmp_path)
    assert [p.name for p in folder.iterdir()] == ["torchyard"]
    assert (folder / "torchyard").resolve() == PACKAGE_PARENT / "torchyard"
    link_sdk(tmp_path)  # again: the same


def test_builders_do_not_modify_their_inputs():
    base = {"PATH": "/usr/bin"}
    node = launch()
    build_env(node, Path("/runs/a"), base)
    assert base == {"PATH": "/usr/bin"}
    assert node.env == {"MY_FLAG": "1", "TORCHYARD_JOB_ID": "999"}


def test_a_long_run_dir_gets_a_short_socket_path_under_tmp():
    long_dir = Path("/var/lib/torchyard/" + "x" * 120)
    path = event_socket_path(long_dir)
    assert path.parent == Path("/tmp")
    assert len(str(path).encode()) <= MAX_SOCKET_PATH_BYTES
    assert path == event_socket_path(long_dir)
    assert path != event_socket_path(Path(str(long_dir) + "y"))


def test_code_root_defaults_to_the_package_and_follows_the_override():
    assert default_code_root({}) == Path(protocol.__file__).resolve().parent
    assert default_code_root({"TORCHYARD_CODE_ROOT": "/srv/code"}) == Path("/srv/code")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "code" / "examples").mkdir(parents=True)
    (tmp_path / "code" / "examples" / "train.py").write_text("print('hi')\n")
    (tmp_path / "outside.py").write_text("print('no')\n")
    (tmp_path / "code" / "examples" / "sneaky.py").symlink_to(tmp_path / "outside.py")
    return tmp_path / "code"


def test_an_entrypoint_inside_the_code_root_resolves_to_its_file(root: Path):
    assert resolve_entrypoint("examples/train.py", root) == (root / "examples" / "train.py").resolve()


@pytest.mark.parametrize(
    ("entrypoint", "says"),
    [
        ("../../etc/passwd", "'..'"),
        ("examples/../../outside.py", "'..'"),
        ("/etc/passwd", "absolute"),
        ("examples/sneaky.py", "outside the code root"),
        ("examples/missing.py", "does not exist"),
        ("examples", "does not exist"),
        ("", "empty"),
    ],
)
def test_it_refuses_an_entrypoint_it_must_not_or_cannot_run(root: Path, entrypoint: str, says: str):
    with pytest.raises(EntrypointError, match=says):
        resolve_entrypoint(entrypoint, root)
