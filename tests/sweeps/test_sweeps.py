"""Sweeps without a stack: the spec refused field by field, and a sweep's life through its services
with its trials' jobs moved by hand (what a stack's events would do): max_concurrent at a time, the
searcher told what each trial reported, a trial pruned at a rung with the comparison, stop and
resume, the best trial. The searcher is Optuna's, its study in the test database (real SQL)."""

from __future__ import annotations

import itertools

import pytest
from django.utils import timezone
from torchyard_server.jobs.models import Job
from torchyard_server.jobs.states import transition_job
from torchyard_server.streaming.models import JobEvent
from torchyard_server.sweeps.models import Sweep, Trial
from torchyard_server.sweeps.services import sweep_advance

pytestmark = pytest.mark.django_db

J = Job.Status
SWEEP = {
    "name": "lr-search",
    "trial": {"entrypoint": "examples/mlp_ddp.py", "args": ["--steps", "40"], "resources": {"nodes": 1, "procs_per_node": 1}},
    "space": {"lr": {"loguniform": [1.0e-4, 1.0e-1]}, "hidden": {"choice": [16, 64]}},
    "searcher": {"name": "asha", "metric": "loss", "mode": "min", "max_trials": 6, "max_concurrent": 2,
                 "min_steps": 2, "reduction_factor": 2, "seed": 3},
}
_keys = itertools.count()


def report(job: Job, step: int, loss: float) -> None:
    JobEvent.objects.create(job=job, attempt=0, rank=0, type="metric", ts=timezone.now(), dedupe_key=f"k{next(_keys)}",
                            payload={"step": step, "loss": loss})


def run(job: Job) -> None:
    for status in (J.PLANNING, J.DISPATCHING, J.RUNNING):
        transition_job(job, status, "test")


def finish(job: Job, status: str = J.COMPLETED) -> None:
    job.refresh_from_db()
    transition_job(job, status, "test")


@pytest.mark.parametrize(("change", "where", "says"), [
    ({"space": {"lr": {"between": [1, 2]}}}, ("space", "lr"), "unknown kind 'between'"),
    ({"space": {"lr": {"loguniform": [0, 1]}}}, ("space", "lr"), "low must be above 0"),
    ({"space": {"lr": {"uniform": [2, 1]}}}, ("space", "lr"), "low < high"),
    ({"space": {}}, ("space",), "at least one hyperparameter"),
    ({"searcher": {"name": "bayes", "metric": "loss"}}, ("searcher", "name"), "is not a valid choice"),
    ({"searcher": {"name": "grid", "metric": "loss"}}, ("space", "lr"), "a grid search takes lists of values"),
    ({"searcher": {"metric": "loss", "max_trail": 3}}, ("searcher", "max_trail"), "did you mean max_trials"),
    ({"trial": {"entrypoint": "examples/mlp_ddp.py", "resources": {"nodez": 2}}}, ("trial", "resources", "nodez"),
     "did you mean nodes"),
    ({"trial": {"name": "x", "entrypoint": "examples/mlp_ddp.py"}}, ("trial", "name"), "leave it out"),
])
def test_a_sweep_that_cannot_run_is_refused_at_its_field(api, two_machines, change, where, says):
    response = api.post("/api/sweeps", {**SWEEP, **change}, format="json")
    assert response.status_code == 400, response.json()
    found = response.json()
    for key in where:
        found = found[key]
    assert says in " ".join(found if isinstance(found, list) else [str(found)]), response.json()
    assert not Sweep.objects.exists()


def test_a_sweep_runs_its_trials_as_jobs_prunes_at_a_rung_and_names_the_best(api, two_machines):
    created = api.post("/api/sweeps", SWEEP, format="json")
    assert created.status_code == 201, created.json()
    body = created.json()
    sweep_id = body["id"]
    assert body["spec"]["searcher"]["max_failures"] == 1 and body["status"] == "running"
    # Two at a time (max_concurrent), each a queued job of the sweep's project named after it.
    first = Trial.objects.filter(sweep_id=sweep_id).order_by("number")
    assert [t.job.name for t in first] == ["lr-search-0", "lr-search-1"]
    assert all(t.job.spec["hyperparameters"] == t.params for t in first)
    a, b = (t.job for t in first)
    run(a), run(b)
    # Trial 0 reaches the rungs first (step 2, then 4): the first to reach a rung goes on.
    for step, loss in ((1, 1.0), (2, 0.5), (3, 0.4), (4, 0.3)):
        report(a, step, loss)
    sweep_advance(sweep_id)
    # Trial 1 is worse at step 2: pruned, its job stopped, the comparison said.
    report(b, 2, 0.9)
    sweep_advance(sweep_id)
    pruned = Trial.objects.get(sweep_id=sweep_id, number=1)
    assert pruned.status == "pruned" and pruned.reason == (
        "pruned at step 2 (loss 0.9): at rung 0 the lowest 1 of the 2 trials that reached it go on (the last at 0.5); "
        "its 0.9 is behind"), pruned.reason
    pruned.job.refresh_from_db()
    assert pruned.job.status == J.STOPPED and pruned.job.status_reason.startswith("pruned by sweep lr-search")
    # Its place is taken at once by trial 2.
    assert Trial.objects.filter(sweep_id=sweep_id, status="running").count() == 2
    report(a, 10, 0.1)
    finish(a)
    sweep_advance(sweep_id)
    done = api.get(f"/api/sweeps/{sweep_id}").json()
    assert done["best_trial"] == {"number": 0, "job": a.pk, "hyperparameters": Trial.objects.get(
        sweep_id=sweep_id, number=0).params, "metric": 0.1}
    assert done["counts"] | {"running": None} == {"running": None, "completed": 1, "pruned": 1, "failed": 0,
                                                  "stopped": 0, "max_trials": 6}

    # Stopped: every running trial's job stops; resumed: their points run again.
    stopped = api.post(f"/api/sweeps/{sweep_id}/stop").json()
    assert stopped["status"] == "stopped", stopped
    left = Trial.objects.filter(sweep_id=sweep_id, status="stopped")
    assert left.count() == 2 and all(t.job.status == J.STOPPED for t in left)
    points = sorted(str(t.params) for t in left)
    resumed = api.post(f"/api/sweeps/{sweep_id}/resume").json()
    assert resumed["status"] == "running"
    again = Trial.objects.filter(sweep_id=sweep_id, status="running")
    assert sorted(str(t.params) for t in again) == points
    assert api.post(f"/api/sweeps/{sweep_id}/resume").status_code == 409

    # The rest complete: the sweep too, with its best.
    while (running := list(Trial.objects.filter(sweep_id=sweep_id, status="running").select_related("job"))):
        for trial in running:
            run(trial.job)
            report(trial.job, 10, 0.2 + trial.number / 100)
            finish(trial.job)
        sweep_advance(sweep_id)
    final = api.get(f"/api/sweeps/{sweep_id}").json()
    assert final["status"] == "completed" and final["best_trial"]["number"] == 0, final
    assert final["counts"]["completed"] + final["counts"]["pruned"] == 6


def test_a_seeded_search_asks_a_new_point_at_each_move_and_the_same_ones_again_from_the_same_seed(api, two_machines):
    spec = {**SWEEP, "searcher": {"name": "random", "metric": "loss", "max_trials": 4, "max_concurrent": 1, "seed": 5}}

    def points() -> list[float]:
        sweep_id = api.post("/api/sweeps", spec, format="json").json()["id"]
        while (running := Trial.objects.filter(sweep_id=sweep_id, status="running").first()) is not None:
            run(running.job)
            report(running.job, 1, 1.0)
            finish(running.job)
            sweep_advance(sweep_id)  # each trial asked by a sampler made anew, as every move of a sweep makes it
        return [t.params["lr"] for t in Trial.objects.filter(sweep_id=sweep_id).order_by("number")]

    first = points()
    assert len(first) == 4 and len(set(first)) == 4, first
    assert points() == first
