"""GET /api/jobs/{id}/metrics: series downsampled in the database onto one step grid, per name and
attempt, each bucket keeping the min and max of every value in it (so a spike survives), with its
mean, count and the steps it saw; values that are not numbers are skipped."""

from __future__ import annotations

import datetime as dt
import math
import random

import pytest
from factories import make_job
from torchyard_server.jobs.models import Job
from torchyard_server.streaming.models import JobEvent

pytestmark = pytest.mark.django_db


def metric_rows(job: Job, reports: list[tuple[int, int, int, dict]]) -> None:
    """Store metric events as ingest would: (attempt, rank, step, numbers)."""
    start = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
    JobEvent.objects.bulk_create([
        JobEvent(job=job, attempt=attempt, rank=rank, node_rank=0, type="metric", ts=start + dt.timedelta(seconds=i),
                 payload={"step": step, **numbers}, dedupe_key=f"t{job.pk}:{i}")
        for i, (attempt, rank, step, numbers) in enumerate(reports)
    ])


def expected_buckets(reports, name, attempt, first, size, last):
    buckets: dict[int, list[tuple[int, float]]] = {}
    for a, _rank, step, numbers in reports:
        value = numbers.get(name)
        if a == attempt and first <= step <= last and isinstance(value, (int, float)):
            buckets.setdefault((step - first) // size, []).append((step, value))
    return [{"step": first + k * size, "first_step": min(s for s, _ in items), "last_step": max(s for s, _ in items),
             "min": min(v for _, v in items), "max": max(v for _, v in items),
             "mean": pytest.approx(sum(v for _, v in items) / len(items)), "count": len(items)}
            for k, items in sorted(buckets.items())]


@pytest.fixture
def trained(owner):
    """Attempt 0: steps 1..1000 on 2 ranks, one spike per rank; attempt 1 resumed at 600, to 1500."""
    job = make_job(name="spiky", owner=owner, status=Job.Status.COMPLETED, attempt=1)
    rng = random.Random(7)
    reports = []
    for attempt, steps in ((0, range(1, 1001)), (1, range(601, 1501))):
        for step in steps:
            for rank in (0, 1):
                loss = 2.0 / math.sqrt(step) + rng.uniform(-0.01, 0.01)
                reports.append((attempt, rank, step, {"loss": loss, "lr": 0.1, "throughput": 100.0 + rank}))
    reports.append((0, 1, 437, {"loss": 55.0}))  # a spike, alone at its step
    reports.append((1, 0, 1203, {"loss": -3.0}))  # a dip
    reports.append((0, 0, 438, {"loss": "nan?"}))  # not a number: skipped
    reports.append((0, 0, 439, {"loss": None}))
    metric_rows(job, reports)
    return job, reports


def test_every_bucket_keeps_its_min_and_max_and_spikes_survive(api, trained):
    job, reports = trained
    body = api.get(f"/api/jobs/{job.pk}/metrics?name=loss&points=37").json()
    size = math.ceil(1500 / 37)
    assert (body["job"], body["from_step"], body["to_step"], body["bucket_steps"]) == (job.pk, 1, 1500, size)
    assert body["names"] == ["loss", "lr", "throughput"]
    assert [(s["name"], s["attempt"]) for s in body["series"]] == [("loss", 0), ("loss", 1)]
    for series in body["series"]:
        want = expected_buckets(reports, "loss", series["attempt"], 1, size, 1500)
        assert series["buckets"] == want
        assert len(series["buckets"]) <= 37
    spike_bucket = next(b for b in body["series"][0]["buckets"] if b["first_step"] <= 437 <= b["last_step"])
    assert spike_bucket["max"] == 55.0 and spike_bucket["mean"] < 55.0
    dip_bucket = next(b for b in body["series"][1]["buckets"] if b["first_step"] <= 1203 <= b["last_step"])
    assert dip_bucket["min"] == -3.0


def test_a_step_range_rank_and_attempt_narrow_the_series(api, trained):
    job, reports = trained
    body = api.get(f"/api/jobs/{job.pk}/metrics?name=loss,throughput&from_step=400&to_step=499&points=10&rank=1&attempt=0").json()
    assert (body["from_step"], body["to_step"], body["bucket_steps"]) == (400, 499, 10)
    rank_one = [r for r in reports if r[1] == 1]
    assert [(s["name"], s["attempt"]) for s in body["series"]] == [("loss", 0), ("throughput", 0)]
    assert body["series"][0]["buckets"] == expected_buckets(rank_one, "loss", 0, 400, 10, 499)
    assert {b["min"] for b in body["series"][1]["buckets"]} == {101.0}
    assert body["series"][0]["buckets"][3]["max"] == 55.0  # step 437 is in [430, 439]


def test_without_a_name_every_series_comes_and_a_job_without_metrics_has_none(api, trained, owner):
    job, _ = trained
    body = api.get(f"/api/jobs/{job.pk}/metrics?points=5").json()
    assert sorted({s["name"] for s in body["series"]}) == ["loss", "lr", "throughput"]
    assert all(len(s["buckets"]) <= 5 for s in body["series"])
    empty = make_job(name="quiet", owner=owner)
    assert api.get(f"/api/jobs/{empty.pk}/metrics").json() == {
        "job": empty.pk, "names": [], "from_step": None, "to_step": None, "bucket_steps": None, "series": []}


@pytest.mark.parametrize("query", ["points=abc", "points=0", "from_step=-1", "from_step=9&to_step=3", "name=loss," + "x" * 201])
def test_bad_parameters_are_a_400_naming_the_field(api, trained, query):
    job, _ = trained
    response = api.get(f"/api/jobs/{job.pk}/metrics?{query}")
    assert response.status_code == 400, response.content
    assert set(response.json()) & {"points", "from_step", "to_step", "name"}
