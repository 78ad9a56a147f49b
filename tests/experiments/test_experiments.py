"""DistroML's experiments: a run is an attempt of a job (`<job>.<attempt>`). `GET /api/experiments`
lists them, `/api/experiments/{run_id}` shows one (spec, nodes, metrics summary, checkpoints,
artifacts), `POST /api/experiments/compare` puts several side by side on one step grid."""

from __future__ import annotations

import datetime as dt
import hashlib
import math

import pytest
from clients import signed_in
from factories import make_job
from torchyard_server.artifacts.services import artifacts_record
from torchyard_server.checkpoints.models import CheckpointManifest
from torchyard_server.jobs.models import Job, JobNode
from torchyard_server.projects.models import Membership, Project
from torchyard_server.streaming.models import JobEvent

pytestmark = pytest.mark.django_db
RUN_FIELDS = {"run_id", "job", "attempt", "name", "project", "owner", "status", "status_reason", "world_size",
              "started_at", "finished_at", "hyperparameters"}
T0 = dt.datetime(2025, 3, 1, tzinfo=dt.UTC)


def node(job, attempt, status, reason="", nproc=2):
    return JobNode.objects.create(job=job, attempt=attempt, machine_name="local-0", host="127.0.0.1", node_rank=0,
                                  nproc=nproc, rank_start=0, rank_end=nproc - 1, status=status, status_reason=reason,
                                  started_at=T0 + dt.timedelta(minutes=attempt),
                                  finished_at=T0 + dt.timedelta(minutes=attempt, seconds=30))


def metrics(job, attempt, steps, **series):
    JobEvent.objects.bulk_create([
        JobEvent(job=job, attempt=attempt, rank=0, type="metric", ts=T0, dedupe_key=f"x{job.pk}.{attempt}:{step}",
                 payload={"step": step, **{name: f(step) for name, f in series.items()}})
        for step in steps
    ])


def loss_a(step):
    return 3.0 / step


def loss_b(step):
    return 2.0 / step + 0.5


@pytest.fixture
def runs(settings, tmp_path, owner, teammate):
    settings.STORAGE_URL = (tmp_path / "store").as_uri()
    a = Job.objects.create(name="lr-0.1", owner=teammate, status=Job.Status.COMPLETED, attempt=1, world_size=2,
                           finished_at=T0 + dt.timedelta(minutes=1, seconds=30),
                           spec={"hyperparameters": {"lr": 0.1, "batch_size": 64, "optim": {"name": "sgd"}},
                                 "args": ["--steps", "100"], "secret_env": {"KEY": "sealed"}})
    node(a, 0, JobNode.Status.FAILED, "rank 1 exited with 1")
    node(a, 1, JobNode.Status.COMPLETED)
    metrics(a, 0, range(1, 51), loss=loss_a)
    metrics(a, 1, range(41, 101), loss=loss_a, acc=lambda s: s / 100)
    CheckpointManifest.objects.create(job=a, step=40, attempt=0, uri="file:///c/40/manifest.json", committed_at=T0)
    CheckpointManifest.objects.create(job=a, step=100, attempt=1, uri="file:///c/100/manifest.json", committed_at=T0)
    out = tmp_path / "store" / f"job-{a.pk}" / "artifacts" / "attempt-1" / "node-0"
    out.mkdir(parents=True)
    (out / "model.pt").write_bytes(b"weights")
    artifacts_record(event={"job": a.pk, "attempt": 1, "node_rank": 0, "files": [
        {"path": "model.pt", "size": 7, "sha256": hashlib.sha256(b"weights").hexdigest(), "uri": (out / "model.pt").as_uri()}]})

    b = Job.objects.create(name="lr-0.01", owner=teammate, status=Job.Status.COMPLETED, world_size=2,
                           spec={"hyperparameters": {"lr": 0.01, "batch_size": 64}, "args": ["--steps", "80"]})
    node(b, 0, JobNode.Status.COMPLETED)
    metrics(b, 0, range(1, 81), loss=loss_b)

    lab = Project.objects.create(name="lab")
    Membership.objects.create(project=lab, user=owner, role="admin")
    hidden = make_job(name="secret", owner=owner, project=lab, status=Job.Status.QUEUED)
    return {"a": a, "b": b, "hidden": hidden}


def test_runs_are_every_attempt_of_the_jobs_a_user_may_see(runs, teammate):
    a, b = runs["a"], runs["b"]
    listed = signed_in(teammate).get("/api/experiments").json()
    assert [r["run_id"] for r in listed] == [f"{b.pk}.0", f"{a.pk}.1", f"{a.pk}.0"]
    assert all(set(r) == RUN_FIELDS | {"final_metrics"} for r in listed)
    first_try = listed[2]
    assert {k: first_try[k] for k in RUN_FIELDS - {"started_at", "finished_at"}} == {
        "run_id": f"{a.pk}.0", "job": a.pk, "attempt": 0, "name": "lr-0.1", "project": "default", "owner": "bob",
        "status": "failed", "status_reason": "rank 1 exited with 1", "world_size": 2,
        "hyperparameters": {"lr": 0.1, "batch_size": 64, "optim": {"name": "sgd"}}}
    assert first_try["started_at"].startswith("2025-03-01T00:00:00") and first_try["finished_at"].startswith("2025-03-01T00:00:30")
    assert listed[1]["status"] == "completed"
    api = signed_in(runs["hidden"].owner)
    assert {r["run_id"] for r in api.get(f"/api/experiments?job={a.pk}").json()} == {f"{a.pk}.0", f"{a.pk}.1"}
    assert [r["run_id"] for r in api.get("/api/experiments?project=lab").json()] == [f"{runs['hidden'].pk}.0"]
    assert [r["run_id"] for r in api.get("/api/experiments?status=failed").json()] == [f"{a.pk}.0"]


def test_listed_runs_carry_each_metrics_final_and_best_value(runs, teammate):
    a, b = runs["a"], runs["b"]
    listed = {r["run_id"]: r["final_metrics"] for r in signed_in(teammate).get("/api/experiments").json()}
    assert listed[f"{a.pk}.0"] == [{"name": "loss", "goal": "min", "last": 3.0 / 50, "last_step": 50, "best": 3.0 / 50}]
    assert listed[f"{a.pk}.1"] == [
        {"name": "acc", "goal": "max", "last": 1.0, "last_step": 100, "best": 1.0},
        {"name": "loss", "goal": "min", "last": 3.0 / 100, "last_step": 100, "best": 3.0 / 100}]
    assert listed[f"{b.pk}.0"] == [{"name": "loss", "goal": "min", "last": loss_b(80), "last_step": 80, "best": loss_b(80)}]
    # The best of a series that went the wrong way is not its last value; a name without a goal has no best.
    JobEvent.objects.create(job=b, attempt=0, rank=0, type="metric", ts=T0, dedupe_key="late",
                            payload={"step": 81, "loss": 9.5, "grad_norm": 2.0, "note": "text is no metric"})
    late = {r["run_id"]: r["final_metrics"] for r in signed_in(teammate).get("/api/experiments").json()}[f"{b.pk}.0"]
    assert late == [{"name": "grad_norm", "goal": None, "last": 2.0, "last_step": 81, "best": None},
                    {"name": "loss", "goal": "min", "last": 9.5, "last_step": 81, "best": loss_b(80)}]


def test_a_run_shows_its_spec_nodes_metrics_checkpoints_and_artifacts(runs, teammate):
    a = runs["a"]
    client = signed_in(teammate)
    body = client.get(f"/api/experiments/{a.pk}.1").json()
    assert set(body) == RUN_FIELDS | {"spec", "nodes", "metrics", "checkpoints", "artifacts"}
    assert body["spec"]["secret_env"] == {"KEY": "***"}
    assert [(n["attempt"], n["status"]) for n in body["nodes"]] == [(1, "completed")]
    assert body["metrics"] == [
        {"name": "acc", "last": 1.0, "last_step": 100, "min": 0.41, "max": 1.0,
         "mean": pytest.approx(sum(s / 100 for s in range(41, 101)) / 60), "count": 60},
        {"name": "loss", "last": pytest.approx(0.03), "last_step": 100, "min": pytest.approx(0.03),
         "max": pytest.approx(3 / 41), "mean": pytest.approx(sum(3 / s for s in range(41, 101)) / 60), "count": 60},
    ]
    assert [c["step"] for c in body["checkpoints"]] == [100]
    assert [(x["path"], x["size"], x["attempt"]) for x in body["artifacts"]] == [("model.pt", 7, 1)]
    earlier = client.get(f"/api/experiments/{a.pk}.0").json()
    assert [c["step"] for c in earlier["checkpoints"]] == [40] and earlier["artifacts"] == []
    assert [m["name"] for m in earlier["metrics"]] == ["loss"] and earlier["metrics"][0]["last_step"] == 50


def test_runs_compare_side_by_side_on_one_step_grid(runs, teammate):
    a, b = runs["a"], runs["b"]
    body = signed_in(teammate).post("/api/experiments/compare", {"runs": [f"{a.pk}.1", f"{b.pk}.0"], "points": 10},
                                    format="json").json()
    assert [r["run_id"] for r in body["runs"]] == [f"{a.pk}.1", f"{b.pk}.0"]
    assert body["hyperparameters"] == [
        {"name": "world_size", "values": [2, 2], "differs": False},
        {"name": "args", "values": ["--steps 100", "--steps 80"], "differs": True},
        {"name": "batch_size", "values": [64, 64], "differs": False},
        {"name": "lr", "values": [0.1, 0.01], "differs": True},
        {"name": "optim.name", "values": ["sgd", None], "differs": True},
    ]
    acc, loss = body["metrics"]
    assert (acc["name"], acc["goal"], loss["name"], loss["goal"]) == ("acc", "max", "loss", "min")
    assert acc["values"][0]["best"] == 1.0 and acc["values"][1] == {
        "last": None, "last_step": None, "min": None, "max": None, "mean": None, "count": 0, "best": None}
    assert loss["values"][0]["best"] == pytest.approx(0.03) and loss["values"][1]["best"] == pytest.approx(2 / 80 + 0.5)
    assert loss["values"][1]["last_step"] == 80
    # One grid for both: steps 1..100 in buckets of 10; each run's buckets line up by step.
    assert (body["from_step"], body["to_step"], body["bucket_steps"]) == (1, 100, 10)
    series = {s["name"]: s["runs"] for s in body["series"]}
    a_loss, b_loss = series["loss"]
    assert [x["step"] for x in a_loss] == [41, 51, 61, 71, 81, 91]
    assert [x["step"] for x in b_loss] == [1, 11, 21, 31, 41, 51, 61, 71]
    assert b_loss[0] == {"step": 1, "first_step": 1, "last_step": 10, "min": pytest.approx(loss_b(10)),
                         "max": pytest.approx(loss_b(1)), "mean": pytest.approx(sum(loss_b(s) for s in range(1, 11)) / 10),
                         "count": 10}
    assert series["acc"][1] == []
    narrowed = signed_in(teammate).post("/api/experiments/compare", {
        "runs": [f"{b.pk}.0"], "metrics": ["loss"], "goals": {"loss": "max"}, "from_step": 20, "to_step": 29,
        "points": 3}, format="json").json()
    assert narrowed["metrics"][0]["goal"] == "max"
    assert (narrowed["from_step"], narrowed["to_step"], narrowed["bucket_steps"]) == (20, 29, math.ceil(10 / 3))
    assert [x["count"] for x in narrowed["series"][0]["runs"][0]] == [4, 4, 2]


def test_a_run_nobody_may_see_or_that_never_was_is_a_404_and_a_bad_request_a_400(runs, teammate):
    client, a, hidden = signed_in(teammate), runs["a"], runs["hidden"]
    for run_id in (f"{hidden.pk}.0", f"{a.pk}.2", "banana", f"{a.pk}"):
        assert client.get(f"/api/experiments/{run_id}").status_code == 404, run_id
    assert client.post("/api/experiments/compare", {"runs": [f"{a.pk}.0", f"{hidden.pk}.0"]},
                       format="json").status_code == 404
    for body, field in (({"runs": []}, "runs"), ({"runs": ["x"]}, "runs"), ({"runs": [f"{a.pk}.0"] * 2}, "runs"),
                        ({"runs": [f"{a.pk}.0"], "goals": {"loss": "up"}}, "goals"),
                        ({"runs": [f"{a.pk}.0"], "points": 0}, "points")):
        response = client.post("/api/experiments/compare", body, format="json")
        assert response.status_code == 400 and field in response.json(), (body, response.content)
