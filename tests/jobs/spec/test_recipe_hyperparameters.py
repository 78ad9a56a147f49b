"""A built-in recipe's hyperparameters: what DistroML's JobSpec and the Go scheduler's task params name
(epochs, optimizer, momentum, weight_decay, learning_rate) reaches the recipe, and anything it does not
read, or cannot take, is a 400 at `hyperparameters.<name>` saying why. A job's own code reads anything."""

from __future__ import annotations

import pytest
from factories import DISTROML_JOBSPEC
from torchyard_server.bundles.models import Bundle
from torchyard_server.jobs.models import Job

pytestmark = pytest.mark.django_db

SHA = "e" * 64
DISTROML = DISTROML_JOBSPEC


def submit(api, hyperparameters: dict, **fields):
    spec = {"name": "h", "entrypoint": "examples/mlp_ddp.py", "resources": {"nodes": 1, "procs_per_node": 2},
            "hyperparameters": hyperparameters, **fields}
    return api.post("/api/jobs", spec, format="json")


def refused(response) -> dict[str, str]:
    assert response.status_code == 400, response.json()
    assert not Job.objects.exists()
    return {key: messages[0] for key, messages in response.json()["hyperparameters"].items()}


def test_distromls_jobspec_with_epochs_is_accepted_and_its_epochs_kept_for_the_recipe(api, two_machines, settings):
    settings.STORAGE_URL = "file:///tmp/torchyard-test-store"  # DistroML's store "local"
    response = api.post("/api/jobs", DISTROML, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["spec"]["hyperparameters"] == {"batch_size": 64, "lr": 0.001, "epochs": 2}


def test_the_go_schedulers_params_are_taken_by_the_recipe(api, two_machines):
    response = submit(api, {"batch_size": 64, "learning_rate": 0.001, "epochs": 90, "optimizer": "sgd",
                            "momentum": 0.9, "weight_decay": 0.0001})
    assert response.status_code == 201, response.json()
    gpt = submit(api, {"epochs": 1, "optimizer": "adam", "weight_decay": 0, "n_layer": 1}, entrypoint="examples/char_gpt.py")
    assert gpt.status_code == 201, gpt.json()


def test_a_name_the_recipe_does_not_read_is_refused_with_what_it_reads(api, two_machines):
    assert refused(submit(api, {"batch_size": 64, "epoch": 2, "nesterov": True})) == {
        "epoch": "mlp_ddp.py does not read epoch (did you mean epochs?); it reads batch_size, lr, learning_rate, "
                 "epochs, optimizer, momentum, weight_decay, hidden, input_dim, dataset_size.",
        "nesterov": "mlp_ddp.py does not read nesterov; it reads batch_size, lr, learning_rate, epochs, optimizer, "
                    "momentum, weight_decay, hidden, input_dim, dataset_size.",
    }


def test_the_go_schedulers_sample_model_and_dataset_are_not_hyperparameters_of_a_recipe(api, two_machines):
    # A JobSpec names them as model and dataset (the Go scheduler's CLI moves them there).
    found = refused(submit(api, {"model": "resnet50", "dataset": "imagenet"}))
    assert found["model"].startswith("mlp_ddp.py does not read model; it reads batch_size")
    assert set(found) == {"model", "dataset"}


@pytest.mark.parametrize(("hyperparameters", "fields", "key", "why"), [
    ({"optimizer": "lamb"}, {}, "optimizer", "mlp_ddp.py builds sgd, adam, adamw, not 'lamb'."),
    ({"momentum": 0.9}, {}, "momentum",
     "momentum is sgd's; mlp_ddp.py runs adam (give optimizer: sgd, or leave momentum out)."),
    ({"optimizer": "adamw", "momentum": 0.9}, {}, "momentum",
     "momentum is sgd's; mlp_ddp.py runs adamw (give optimizer: sgd, or leave momentum out)."),
    ({"weight_decay": -1}, {}, "weight_decay", "must be a number, 0 or more (is -1)."),
    ({"lr": 0.1, "learning_rate": 0.1}, {}, "learning_rate", "give the learning rate once: lr or learning_rate."),
    ({"epochs": 0}, {}, "epochs", "must be a whole number of passes over the data, 1 or more (is 0)."),
    ({"epochs": 1.5}, {}, "epochs", "must be a whole number of passes over the data, 1 or more (is 1.5)."),
    ({"epochs": 2}, {"args": ["--steps", "100"]}, "epochs",
     "give epochs or --steps in args, not both: epochs set the recipe's steps."),
    ({"epochs": 2}, {"entrypoint": "examples/char_gpt.py", "args": ["--lines", "/data/shards"]}, "epochs",
     "char_gpt.py reads --lines shards as a stream and cannot count an epoch ahead; give --steps in args instead."),
    ({"epochs": 2, "dataset_size": 5000}, {"dataset": "digits"}, "dataset_size",
     "dataset_size sizes synthetic data; digits has its own size (1,500 training images for digits)."),
    ({"dataset_size": 0}, {}, "dataset_size", "must be a whole number of samples, 1 or more (is 0)."),
])
def test_a_value_the_recipe_cannot_take_is_refused_by_name(api, two_machines, hyperparameters, fields, key, why):
    assert refused(submit(api, hyperparameters, **fields)) == {key: why}


def test_the_rust_coordinators_worker_reads_no_hyperparameters(api, two_machines):
    found = refused(submit(api, {"batch_size": 8}, entrypoint="examples/seed001_worker.py"))
    assert found == {"batch_size": "seed001_worker.py reads no hyperparameters."}


def test_a_script_of_ones_own_reads_whatever_it_likes(api, two_machines, owner):
    Bundle.objects.create(sha256=SHA, size=10, unpacked_size=10, files=[{"path": "train.py", "size": 1}]).owners.add(owner)
    response = submit(api, {"nesterov": True, "model": "resnet50", "momentum": 0.9}, code={"bundle": SHA},
                      entrypoint="train.py")
    assert response.status_code == 201, response.json()


def test_the_go_schedulers_sample_task_as_written_is_refused_naming_its_model_and_dataset_together(api, two_machines):
    # What `torchyard submit sample_task.json` sends for it (workers/torchyard/client/specfile.py).
    response = api.post("/api/jobs", {
        "name": "ResNet50 Training", "model": "resnet50", "dataset": "imagenet",
        "resources": {"nodes": 1, "procs_per_node": 2, "gpus_per_node": 2, "min_gpu_memory": 8192},
        "hyperparameters": {"batch_size": 64, "learning_rate": 0.001, "epochs": 90, "optimizer": "sgd",
                            "momentum": 0.9, "weight_decay": 0.0001}}, format="json")
    assert response.status_code == 400
    assert response.json() == {
        "model": ["unknown model 'resnet50'; known: char_gpt, mlp, transformer."],
        "dataset": ["unknown dataset 'imagenet'; built-in datasets: synthetic, digits, python-source."]}
