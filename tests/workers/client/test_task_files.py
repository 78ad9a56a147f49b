"""The Go scheduler's task files as `torchyard submit` reads them: the JobSpec each becomes, the message
a malformed one gets, and the server's refusals named as the file names its fields (the file against a
real server: tests/integration/test_seed_scheduler.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from torchyard.client import CliError
from torchyard.client.specfile import in_file_terms, load_spec_file


def loaded(tmp_path: Path, document: object, name: str = "task.json"):
    path = tmp_path / name
    path.write_text(json.dumps(document))
    return load_spec_file(path)


def test_the_sample_task_becomes_one_node_with_a_rank_per_gpu_its_model_and_dataset_picking_the_recipe(tmp_path):
    task = loaded(tmp_path, {"name": "ResNet50 Training", "required_gpus": 2, "min_gpu_memory": 8192,
                             "params": {"model": "resnet50", "dataset": "imagenet", "batch_size": "64",
                                        "learning_rate": "0.001", "epochs": "90", "optimizer": "sgd", "momentum": "0.9",
                                        "weight_decay": "1e-4", "note": "v1.10 run", "flag": True}})
    assert task.spec == {
        "name": "ResNet50 Training", "model": "resnet50", "dataset": "imagenet",
        "resources": {"nodes": 1, "procs_per_node": 2, "gpus_per_node": 2, "min_gpu_memory": 8192},
        "hyperparameters": {"batch_size": 64, "learning_rate": 0.001, "epochs": 90, "optimizer": "sgd",
                            "momentum": 0.9, "weight_decay": 0.0001, "note": "v1.10 run", "flag": True},
    }
    assert task.code_dir is None
    assert task.names == {"hyperparameters": "params", "model": "params.model", "dataset": "params.dataset"}
    assert task.notes == [f"{tmp_path / 'task.json'}: a Go scheduler task: runs the built-in recipe for model "
                          "resnet50 and dataset imagenet on 2 rank(s), its other params as the recipe's "
                          "hyperparameters (give entrypoint to run a script of your own)"]
    plain = loaded(tmp_path, {"name": "plain", "params": {"batch_size": "64"}})
    assert plain.spec["entrypoint"] == "examples/mlp_ddp.py" and plain.names == {"hyperparameters": "params"}
    assert plain.notes == [f"{tmp_path / 'task.json'}: a Go scheduler task: runs the built-in recipe "
                           "examples/mlp_ddp.py on 1 rank(s) with its params as hyperparameters (give entrypoint "
                           "to run a script of your own)"]


def test_a_task_with_a_script_of_its_own_gives_it_every_param(tmp_path):
    task = loaded(tmp_path, {"params": {"model": "resnet50", "dataset": "imagenet", "lr": "0.1"},
                             "entrypoint": "train.py", "code": {"bundle": "a" * 64}})
    assert task.spec["hyperparameters"] == {"model": "resnet50", "dataset": "imagenet", "lr": 0.1}
    assert "model" not in task.spec and "dataset" not in task.spec and task.notes == []


def test_the_servers_refusal_names_the_params_as_the_task_file_does(tmp_path):
    task = loaded(tmp_path, {"params": {"model": "resnet50", "momentum": "0.9"}})
    refused = CliError("POST /api/jobs: HTTP 400\n...", heading="POST /api/jobs: HTTP 400", errors={
        "model": ["unknown model 'resnet50'; known: char_gpt, mlp, transformer."],
        "hyperparameters": {"momentum": ["momentum is sgd's; mlp_ddp.py runs adam (give optimizer: sgd, or leave "
                                         "momentum out)."]},
        "resources": {"procs_per_node": ["..."]}})
    assert str(in_file_terms(refused, task.names)).splitlines() == [
        "POST /api/jobs: HTTP 400",
        "  params.model: unknown model 'resnet50'; known: char_gpt, mlp, transformer.",
        "  params.momentum: momentum is sgd's; mlp_ddp.py runs adam (give optimizer: sgd, or leave momentum out).",
        "  resources.procs_per_node: ...",
    ]
    unrelated = CliError("cannot reach the server")
    assert in_file_terms(unrelated, task.names) is unrelated


def test_defaults_and_jobspec_keys_beside_the_seeds(tmp_path):
    (tmp_path / "proj").mkdir()
    task = loaded(tmp_path, {"params": {"lr": "0.1"}, "entrypoint": "train.py", "args": ["--steps", "5"],
                             "placement": {"policy": "balanced"}, "code": {"dir": "proj"}}, name="nightly.yaml")
    assert task.spec["name"] == "nightly"
    assert task.spec["resources"] == {"nodes": 1, "procs_per_node": 1, "gpus_per_node": 1, "min_gpu_memory": 0}
    assert (task.spec["entrypoint"], task.spec["args"], task.spec["placement"]) == (
        "train.py", ["--steps", "5"], {"policy": "balanced"})
    assert task.code_dir == tmp_path / "proj" and task.notes == []
    cpu = loaded(tmp_path, {"name": "cpu", "required_gpus": 0})
    assert cpu.spec["resources"] == {"nodes": 1, "procs_per_node": 1, "gpus_per_node": 0, "min_gpu_memory": 0}
    # A JobSpec without the seed's keys is left as it is.
    assert loaded(tmp_path, {"name": "j", "entrypoint": "x.py"}).spec == {"name": "j", "entrypoint": "x.py"}


@pytest.mark.parametrize(("document", "message"), [
    ({"required_gpus": -1}, 'required_gpus: expected the number of GPUs the task needs (a whole number, 0 or more), '
                            'found -1'),
    ({"required_gpus": True}, "required_gpus: expected the number of GPUs the task needs (a whole number, 0 or more), "
                              "found true"),
    ({"required_gpus": 1, "min_gpu_memory": "8GB"}, 'min_gpu_memory: expected the memory each GPU needs in MB '
                                                    '(a whole number, 0 or more), found "8GB"'),
    ({"params": "batch_size=64"}, 'params: expected a mapping of names to values, such as {"batch_size": "64"}, '
                                  'found "batch_size=64"'),
    ({"name": "", "params": {}}, 'name: expected the task\'s name as text, found ""'),
    ({"required_gpus": 1, "resources": {"nodes": 2}}, "a Go scheduler task file gives required_gpus, min_gpu_memory "
                                                      "and params; resources belong to a JobSpec: give one form or the "
                                                      "other"),
])
def test_a_malformed_task_file_names_the_key(tmp_path, document, message):
    with pytest.raises(CliError) as refused:
        loaded(tmp_path, document)
    assert str(refused.value) == f"{tmp_path / 'task.json'}: {message}"


def submitted(*argv: str):
    from torchyard.cli import _submitted, build_parser

    return _submitted(build_parser().parse_args(["submit", *argv]))


def test_the_go_schedulers_submit_flags_make_the_same_task_as_its_file(tmp_path):
    by_flags = submitted("--name", "ResNet50 Training", "--gpus=2", "--memory=8192", "--param", "batch_size=64")
    task = tmp_path / "sample_task.json"
    task.write_text(json.dumps({"name": "ResNet50 Training", "required_gpus": 2, "min_gpu_memory": 8192,
                                "params": {"batch_size": "64"}}))
    by_config = submitted(f"--config={task}")
    assert by_flags.spec == by_config.spec == load_spec_file(task).spec
    assert by_flags.spec["resources"]["gpus_per_node"] == 2 and by_flags.spec["hyperparameters"] == {"batch_size": 64}


def test_a_task_by_flags_asks_for_gpus_of_4096_mb_unless_told_as_the_go_schedulers_submit_does():
    assert submitted("--name", "t").spec["resources"] == {"nodes": 1, "procs_per_node": 1, "gpus_per_node": 1,
                                                          "min_gpu_memory": 4096}
    assert submitted("--name", "t", "--gpus", "2", "--memory", "0").spec["resources"]["min_gpu_memory"] == 0
    assert submitted("--name", "cpu", "--gpus", "0").spec["resources"] == {
        "nodes": 1, "procs_per_node": 1, "gpus_per_node": 0, "min_gpu_memory": 0}  # no GPU to ask memory of
    flags = submitted("--name", "t", "--param", "model=char_gpt", "--param", "epochs=1")
    assert (flags.spec["model"], flags.spec["hyperparameters"]) == ("char_gpt", {"epochs": 1})


@pytest.mark.parametrize(("argv", "message"), [
    ((), "give a JobSpec or task file"),
    (("job.yaml", "--gpus", "2"), "--gpus describe a task without a file"),
    (("job.yaml", "--config", "job.yaml"), "give the file once"),
])
def test_submit_says_what_is_missing_or_too_much(argv, message):
    with pytest.raises(CliError, match=message):
        submitted(*argv)


def test_a_bad_submit_flag_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit):
        submitted("--gpus", "two")
    assert "expected a whole number, 0 or more, found 'two'" in capsys.readouterr().err
