"""Function jobs (torchyard.fn) on the server: the spec's `function` section, the results its ranks
report (recorded from `result` events, shown and handed out only to who may see the job), and a
function that raised failing its job without a retry."""

from __future__ import annotations

import hashlib

import pytest
from bundles.test_bundles import archive, put
from clients import downloaded, signed_in
from torchyard import protocol
from torchyard_server.artifacts.services import function_result_record
from torchyard_server.jobs.control.reports import node_report_state
from torchyard_server.jobs.models import Job, JobNode

pytestmark = pytest.mark.django_db


@pytest.fixture
def bundles(api, settings, tmp_path):
    settings.STORAGE_URL = (tmp_path / "store").as_uri()
    code = archive({"train.py": b"def train():\n    return 1\n"})
    payload = archive({"function.pkl": b"pickled", "function.json": b"{}"})
    not_a_payload = archive({"other.txt": b"x"})
    for body in (code, payload, not_a_payload):
        assert put(api, body).status_code == 201
    return {name: hashlib.sha256(body).hexdigest()
            for name, body in (("code", code), ("payload", payload), ("other", not_a_payload))}


def function_spec(bundles, **extra) -> dict:
    return {"name": "fn train", "code": {"bundle": bundles["code"]},
            "function": {"payload": bundles["payload"], "name": "train", "python": "3.11"},
            "resources": {"nodes": 2, "procs_per_node": 1}, **extra}


def test_a_function_spec_is_accepted_and_runs_the_runner(api, bundles, two_machines):
    created = api.post("/api/jobs", function_spec(bundles), format="json")
    assert created.status_code == 201, created.json()
    spec = created.json()["spec"]
    assert spec["function"] == {"payload": bundles["payload"], "name": "train", "python": "3.11",
                                "size": spec["function"]["size"]}
    assert "entrypoint" not in spec


@pytest.mark.parametrize(("change", "field", "message"), [
    ({"entrypoint": "train.py"}, "entrypoint", "give no entrypoint"),
    ({"code": None}, "code", "give code.bundle too"),
    ({"function": {"payload": "0" * 64, "name": "train", "python": "3.11"}}, "function", "payload first"),
    ({"function": {"payload": "nope", "name": "train", "python": "3.11"}}, "function", "64 hex digit"),
    ({"function": {"payload": None, "name": "train", "python": "three"}}, "function", "such as 3.11"),
    ({"resources": {"nodes": 1, "procs_per_node": 1, "memory_per_node": -1}}, "resources", "greater than"),
    ({"placement": {"labels": {"": "x"}}}, "placement", "each key 1 to 100"),
])
def test_a_bad_function_spec_is_refused_field_by_field(api, bundles, two_machines, change, field, message):
    spec = function_spec(bundles)
    for key, value in change.items():
        if value is None and key == "code":
            spec.pop("code")
        elif key == "function" and value["payload"] is None:
            spec["function"] = {**spec["function"], "python": value["python"]}
        else:
            spec[key] = value
    refused = api.post("/api/jobs", spec, format="json")
    assert refused.status_code == 400
    assert field in refused.json() and message in str(refused.json()[field]), refused.json()


def test_a_payload_must_hold_the_pickle_and_be_the_submitters_own(api, teammate, bundles, two_machines, settings):
    other = api.post("/api/jobs", function_spec(bundles, function={
        "payload": bundles["other"], "name": "train", "python": "3.11"}), format="json")
    assert other.status_code == 400 and "holds no function.pkl" in str(other.json()["function"])
    stranger = signed_in(teammate).post("/api/jobs", function_spec(bundles), format="json")
    assert stranger.status_code == 400 and "no such bundle" in str(stranger.json()["code"])
    over = api.post("/api/jobs", function_spec(bundles, function={
        "payload": bundles["payload"], "name": "train", "python": "3.11",
        "result_max_bytes": settings.RESULT_MAX_BYTES + 1}), format="json")
    assert over.status_code == 400 and "TORCHYARD_RESULT_MAX_BYTES" in str(over.json()["function"])


def test_the_planner_skips_machines_on_another_python_without_the_memory_or_labels(api, bundles, two_machines):
    a, b = two_machines
    b.labels = {"zone": "lab-2"}
    b.save()
    plan = api.post("/api/jobs/plan", function_spec(
        bundles, resources={"nodes": 1, "procs_per_node": 1}, placement={"labels": {"zone": "lab-2"}}), format="json")
    assert plan.status_code == 200, plan.json()
    assert [n["machine_name"] for n in plan.json()["nodes"]] == ["gpu-b"]
    assert {s["machine_name"]: s["reason"] for s in plan.json()["skipped"]} == {
        "gpu-a": "label zone=lab-2 asked, the machine has no label zone"}
    # Each machine has 8 GiB, 10% in use.
    memory = api.post("/api/jobs/plan", function_spec(
        bundles, resources={"nodes": 1, "procs_per_node": 1, "memory_per_node": 8 << 30}), format="json")
    assert memory.status_code == 400
    assert {s["reason"] for s in memory.json()["skipped"]} == {"7.2 GiB of memory free, 8.0 GiB asked"}
    too_much = api.post("/api/jobs/plan", function_spec(
        bundles, resources={"nodes": 1, "procs_per_node": 1, "memory_per_node": 9 << 30}), format="json")
    assert {s["reason"] for s in too_much.json()["skipped"]} == {"8.0 GiB of memory, 9.0 GiB asked"}
    cores = api.post("/api/jobs/plan", function_spec(
        bundles, resources={"nodes": 1, "procs_per_node": 1, "cpus_per_node": 16}), format="json")
    assert {s["reason"] for s in cores.json()["skipped"]} == {"4 cores, 16 asked"}


def _function_job(owner, tmp_path, status=Job.Status.RUNNING) -> Job:
    job = Job.objects.create(name="fn train", owner=owner, status=status, attempt=0, world_size=2,
                             spec={"function": {"name": "train"}, "fault_tolerance": {"max_restarts": 3}})
    for rank in (0, 1):
        JobNode.objects.create(job=job, attempt=0, machine_name=f"gpu-{rank}", host="10.0.0.1", node_rank=rank,
                               nproc=1, rank_start=rank, rank_end=rank, status=JobNode.Status.RUNNING)
    return job


def _stored(tmp_path, job: Job, rank: int, body: bytes) -> str:
    path = tmp_path / "store" / f"job-{job.pk}" / "results" / "attempt-0" / f"rank-{rank}.pkl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(body)
    return path.as_uri()


def test_results_are_recorded_once_shown_and_served_to_who_may_see_the_job(
        api, owner, outsider, tmp_path, settings):
    settings.STORAGE_URL = (tmp_path / "store").as_uri()
    job = _function_job(owner, tmp_path, status=Job.Status.COMPLETED)
    uri = _stored(tmp_path, job, 1, b"value of rank 1")
    event = {"job": job.pk, "attempt": 0, "node_rank": 1, "rank": 1, "ok": True, "size": 15, "sha256": "ab",
             "uri": uri, "repr": "{'loss': 0.1}", "error_type": "", "error": "", "traceback": ""}
    function_result_record(event=event)
    function_result_record(event=event)  # redelivered: recorded once
    (tmp_path / "elsewhere.pkl").write_bytes(b"not the job's")
    function_result_record(event={**event, "rank": 0, "node_rank": 0, "uri": (tmp_path / "elsewhere.pkl").as_uri()})
    answer = api.get(f"/api/jobs/{job.pk}/results").json()
    assert answer["function"] == "train" and answer["world_size"] == 2 and answer["status"] == "completed"
    first, second = answer["results"]
    # A value outside the job's store is never handed out: that rank's result is text only.
    assert (first["rank"], first["ok"], first["has_value"], first["error_type"]) == (0, False, False, "ResultLost")
    assert (second["rank"], second["machine"], second["repr"], second["has_value"]) == (1, "gpu-1", "{'loss': 0.1}", True)
    served = api.get(f"/api/jobs/{job.pk}/results/1", HTTP_ACCEPT="application/octet-stream")
    assert served.status_code == 200 and downloaded(served) == b"value of rank 1"
    assert api.get(f"/api/jobs/{job.pk}/results/0").status_code == 404
    # A user who may not see the job sees neither.
    stranger = signed_in(outsider)
    assert stranger.get(f"/api/jobs/{job.pk}/results").status_code == 404
    assert stranger.get(f"/api/jobs/{job.pk}/results/1").status_code == 404
    script = Job.objects.create(name="script", owner=owner, spec={"entrypoint": "train.py"})
    assert api.get(f"/api/jobs/{script.pk}/results").status_code == 404


def _report(node: JobNode, *, fatal: bool, reason: str) -> None:
    event = {"type": protocol.STATE, "node": node.pk, "status": protocol.NODE_FAILED, "exit_code": 1,
             "reason": reason, "last_lines": []}
    if fatal:
        event["fatal"] = True
    node_report_state(event=event)


@pytest.mark.django_db(transaction=True)
def test_a_function_that_raised_fails_its_job_without_a_retry(owner, tmp_path):
    job = _function_job(owner, tmp_path)
    node = job.nodes.get(node_rank=1)
    _report(node, fatal=True, reason="node rank 1: global rank 1 raised ValueError: bad lr")
    job.refresh_from_db()
    assert job.status == Job.Status.FAILED and job.restarts == 0
    assert job.status_reason.startswith("node 1 (gpu-1): global rank 1 raised ValueError: bad lr")
    assert "not retried" in job.status_reason


@pytest.mark.django_db(transaction=True)
def test_a_peers_failure_first_starts_a_recovery_that_the_raising_node_then_ends(owner, tmp_path):
    job = _function_job(owner, tmp_path)
    survivor, raiser = job.nodes.get(node_rank=0), job.nodes.get(node_rank=1)
    # The surviving node's ranks saw a peer vanish (not fatal): recovery begins ...
    _report(survivor, fatal=False, reason="node rank 0: torchrun exited with code 1")
    job.refresh_from_db()
    assert job.status == Job.Status.RECOVERING
    # ... until the node whose function raised says so: no relaunch.
    _report(raiser, fatal=True, reason="node rank 1: global rank 1 raised ValueError: bad lr")
    job.refresh_from_db()
    assert job.status == Job.Status.FAILED
    assert "global rank 1 raised ValueError" in job.status_reason and "not retried" in job.status_reason
