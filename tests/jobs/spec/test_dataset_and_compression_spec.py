"""A JobSpec's `dataset` (DistroML's, DistroML) and `compression` settings: a known dataset reaches
the recipe through the job's config, an unknown one is refused naming the choices; each compression
hook takes its own settings, checked field by field, and no other hook's."""

import pytest
from torchyard_server.bundles.models import Bundle
from torchyard_server.jobs.control.launch import launch_payload as _launch_payload
from torchyard_server.jobs.models import Job, JobNode
from torchyard_server.jobs.spec.jobspec import JobSpec
from torchyard_server.jobs.spec.plan import Plan

pytestmark = pytest.mark.django_db

SHA = "d" * 64
PLAN = {"nnodes": 1, "procs_per_node": 2, "world_size": 2, "master_addr": "10.0.0.1", "master_port": 29500,
        "backend": "gloo", "nodes": [{"node_rank": 0, "host": "10.0.0.1", "machine_name": "gpu-a"}]}


def submit(api, **fields):
    spec = {"name": "d", "resources": {"nodes": 1, "procs_per_node": 2}, **fields}
    return api.post("/api/jobs", spec, format="json")


def launch_config(response) -> dict:
    job = Job.objects.get(pk=response.json()["id"])
    node = JobNode.objects.create(job=job, attempt=0, machine_name="gpu-a", host="10.0.0.1", node_rank=0, nproc=2,
                                  rank_start=0, rank_end=1)
    return _launch_payload(job, JobSpec.from_json(job.spec), Plan.from_json(PLAN), node, "")["config"]


def test_a_distroml_spec_with_the_digits_dataset_trains_the_mlp_on_it(api, two_machines):
    response = api.post("/api/jobs", {
        "name": "mnist-ddp-demo", "framework": "pytorch", "model": "mlp", "dataset": "digits",
        "resources": {"workers": 2, "gpus_per_worker": 0}, "distributed": {"strategy": "data_parallel", "backend": "gloo"},
        "hyperparameters": {"batch_size": 64, "lr": 0.01},
        "compression": {"enabled": True, "hook": "topk", "ratio": 0.05}}, format="json")
    assert response.status_code == 201, response.json()
    spec = response.json()["spec"]
    assert spec["entrypoint"] == "examples/mlp_ddp.py" and spec["dataset"] == "digits"
    config = launch_config(response)
    assert config["dataset"] == "digits"
    assert config["compression"] == {"enabled": True, "hook": "topk", "ratio": 0.05}


def test_a_dataset_alone_picks_the_recipe_that_trains_on_it(api, two_machines):
    response = submit(api, dataset="digits")
    assert response.status_code == 201, response.json()
    assert response.json()["spec"]["entrypoint"] == "examples/mlp_ddp.py"
    source = submit(api, dataset="python-source")
    assert source.json()["spec"]["entrypoint"] == "examples/char_gpt.py"


def test_an_unknown_dataset_is_refused_naming_the_choices(api, two_machines):
    response = submit(api, model="mlp", dataset="imagenet")
    assert response.status_code == 400
    assert response.json()["dataset"] == ["unknown dataset 'imagenet'; built-in datasets: synthetic, digits, python-source."]
    assert not Job.objects.exists()


def test_a_recipe_is_refused_a_dataset_it_does_not_train_on(api, two_machines):
    response = submit(api, model="char_gpt", dataset="digits")
    assert response.status_code == 400
    assert response.json()["dataset"] == [
        "examples/char_gpt.py trains on python-source, not digits; digits is trained by examples/mlp_ddp.py."]
    fsdp = submit(api, entrypoint="examples/mlp_fsdp.py", dataset="synthetic")
    assert fsdp.status_code == 201, fsdp.json()


def test_a_script_of_ones_own_gets_the_dataset_name_in_its_config(api, two_machines, owner):
    Bundle.objects.create(sha256=SHA, size=10, unpacked_size=10, files=[{"path": "train.py", "size": 1}]).owners.add(owner)
    response = submit(api, code={"bundle": SHA}, entrypoint="train.py", dataset="digits")
    assert response.status_code == 201, response.json()
    assert launch_config(response)["dataset"] == "digits"


def test_naming_a_hook_turns_compression_on_with_its_defaults(api, two_machines):
    powersgd = submit(api, model="mlp", compression={"hook": "powersgd", "rank": 2})
    assert powersgd.status_code == 201, powersgd.json()
    assert powersgd.json()["spec"]["compression"] == {"enabled": True, "hook": "powersgd", "rank": 2, "start_iter": 10}
    topk = submit(api, model="mlp", compression={"hook": "topk"})
    assert topk.json()["spec"]["compression"] == {"enabled": True, "hook": "topk", "ratio": 0.01}
    # Without a hook the section keeps its old meaning: off unless enabled.
    plain = submit(api, model="mlp")
    assert plain.json()["spec"]["compression"] == {"enabled": False, "hook": "fp16"}
    off = submit(api, model="mlp", compression={"enabled": False, "hook": "powersgd", "start_iter": 5})
    assert off.json()["spec"]["compression"] == {"enabled": False, "hook": "powersgd", "rank": 1, "start_iter": 5}


@pytest.mark.parametrize(("compression", "errors"), [
    ({"hook": "powersgd", "rank": 0}, {"rank": ["Ensure this value is greater than or equal to 1."]}),
    ({"hook": "powersgd", "rank": "two"}, {"rank": ["A valid integer is required."]}),
    ({"hook": "powersgd", "start_iter": 1}, {"start_iter": ["Ensure this value is greater than or equal to 2."]}),
    ({"hook": "topk", "ratio": 0}, {"ratio": ["must be above 0 (a share of the gradient's entries, at most 1)."]}),
    ({"hook": "topk", "ratio": 1.5}, {"ratio": ["Ensure this value is less than or equal to 1."]}),
    ({"hook": "topk", "ratio": -0.1}, {"ratio": ["Ensure this value is greater than or equal to 0."]}),
    ({"hook": "topk", "ratio": True}, {"ratio": ["A valid number is required."]}),
    ({"hook": "topk", "rank": 2}, {"rank": ["a setting of the powersgd hook; hook is topk."]}),
    ({"hook": "fp16", "ratio": 0.1, "start_iter": 4}, {
        "ratio": ["a setting of the topk hook; hook is fp16."],
        "start_iter": ["a setting of the powersgd hook; hook is fp16."]}),
    ({"hook": "onebit"}, {"hook": ['"onebit" is not a valid choice.']}),
])
def test_bad_compression_settings_are_refused_field_by_field(api, two_machines, compression, errors):
    response = submit(api, model="mlp", compression=compression)
    assert response.status_code == 400
    assert response.json()["compression"] == errors
    assert not Job.objects.exists()


def test_every_hook_of_the_sdk_is_accepted(api, two_machines):
    for hook in ("none", "fp16", "bf16", "powersgd", "topk"):
        response = submit(api, model="mlp", compression={"enabled": True, "hook": hook})
        assert response.status_code == 201, response.json()
        assert launch_config(response)["compression"]["hook"] == hook
