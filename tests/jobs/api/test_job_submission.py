"""POST /api/jobs and POST /api/jobs/plan: bad input gets a 400 with field errors, never a 500."""

import pytest
from factories import DISTROML_JOBSPEC
from torchyard import recipe_params
from torchyard_server.jobs.models import Job
from torchyard_server.jobs.spec.jobspec import JobSpec

pytestmark = pytest.mark.django_db

GOOD = {
    "name": "demo",
    "entrypoint": "examples/mlp_ddp.py",
    "resources": {"nodes": 2, "procs_per_node": 2},
    "hyperparameters": {"batch_size": 64, "lr": 0.001},
}


def spec(**changes):
    out = {**GOOD}
    for key, value in changes.items():
        out[key] = value
    return out


def test_it_accepts_a_good_spec_and_queues_the_job(api, two_machines):
    response = api.post("/api/jobs", GOOD, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["status"] == "queued"
    assert body["spec"]["resources"] == {"nodes": 2, "procs_per_node": 2, "gpus_per_node": 0, "min_gpu_memory": 0}
    assert body["spec"]["fault_tolerance"] == {"mode": "restart", "max_restarts": 3, "heartbeat_timeout": 10.0, "retry_same_error": 1, "restart_delay": 0.0,
                                               "stall_timeout": "auto",
                                               "on_stall": "report", "exit_grace": 30.0, "stragglers": "report",
                                               "straggler_threshold": 0.3, "straggler_window": 60.0}
    assert Job.objects.get(pk=body["id"]).owner.username == "alice"


def test_it_refuses_a_spec_with_zero_nodes(api, two_machines):
    response = api.post("/api/jobs", spec(resources={"nodes": 0, "procs_per_node": 2}), format="json")
    assert response.status_code == 400
    assert "nodes" in response.json()["resources"]


def test_it_refuses_an_unknown_recipe(api, two_machines):
    response = api.post("/api/jobs", spec(entrypoint="examples/nope.py"), format="json")
    assert response.status_code == 400
    assert "unknown recipe" in response.json()["entrypoint"][0]


@pytest.mark.parametrize("path", ["../../etc/passwd", "/etc/passwd", "examples/../../x.py"])
def test_it_refuses_an_entrypoint_that_escapes_the_code_directory(api, two_machines, path):
    response = api.post("/api/jobs", spec(entrypoint=path), format="json")
    assert response.status_code == 400
    assert "entrypoint" in response.json()


def test_it_refuses_more_nodes_than_online_machines_with_the_reason(api, two_machines):
    response = api.post("/api/jobs", spec(resources={"nodes": 4, "procs_per_node": 1}), format="json")
    assert response.status_code == 400
    assert "needs 4 online machines" in response.json()["resources"][0]
    assert not Job.objects.exists()


def test_it_refuses_a_body_that_is_not_json(api, two_machines):
    response = api.post("/api/jobs", data="{not json", content_type="application/json")
    assert response.status_code == 400
    assert "JSON parse error" in response.json()["detail"]


def test_it_refuses_a_body_that_is_a_json_list(api, two_machines):
    response = api.post("/api/jobs", [1, 2], format="json")
    assert response.status_code == 400


def test_it_refuses_unknown_fields_so_typos_do_not_pass_silently(api, two_machines):
    response = api.post("/api/jobs", {**GOOD, "resorces": {"nodes": 1}}, format="json")
    assert response.status_code == 400
    assert response.json()["resorces"] == ["unknown field (did you mean resources?)."]


def test_keep_global_batch_refuses_a_batch_that_does_not_divide(api, two_machines):
    response = api.post("/api/jobs", spec(hyperparameters={"batch_size": 30}), format="json")
    assert response.status_code == 400
    assert "hyperparameters" in response.json()


@pytest.mark.parametrize("name", ["RANK", "MASTER_PORT", "TORCHYARD_JOB_ID", "1BAD", "A-B"])
def test_it_refuses_environment_variables_it_cannot_honour(api, two_machines, name):
    response = api.post("/api/jobs", spec(env={name: "x"}), format="json")
    assert response.status_code == 400
    assert "env" in response.json()


def test_args_are_kept_verbatim_as_an_argv_list(api, two_machines):
    args = ["--steps", "10", "; rm -rf / #", "$(whoami)"]
    response = api.post("/api/jobs", spec(args=args), format="json")
    assert response.status_code == 201
    assert response.json()["spec"]["args"] == args


def test_the_distroml_jobspec_is_accepted_as_written(api, two_machines):
    distroml = DISTROML_JOBSPEC
    plan = api.post("/api/jobs/plan", distroml, format="json")
    assert plan.status_code == 200, plan.json()
    assert plan.json()["world_size"] == 4
    assert [n["nproc"] for n in plan.json()["nodes"]] == [2, 2]
    assert plan.json()["hyperparameters"]["batch_size"] == 16
    created = api.post("/api/jobs", distroml, format="json")
    assert created.status_code == 201
    assert created.json()["spec"]["entrypoint"] == "examples/mlp_ddp.py"


def test_a_strategy_other_than_data_parallel_is_refused(api, two_machines):
    response = api.post("/api/jobs", spec(distributed={"strategy": "pipeline"}), format="json")
    assert response.status_code == 400
    assert "data_parallel" in str(response.json()["distributed"])


def test_the_plan_preview_places_ranks_and_launches_nothing(api, two_machines):
    response = api.post("/api/jobs/plan", GOOD, format="json")
    assert response.status_code == 200
    plan = response.json()
    assert plan["world_size"] == 4
    assert plan["backend"] == "gloo"
    assert [(n["rank_start"], n["rank_end"]) for n in plan["nodes"]] == [(0, 1), (2, 3)]
    assert plan["master_addr"] == plan["nodes"][0]["host"]
    assert plan["hyperparameters"]["batch_size"] == 16
    assert not Job.objects.exists()


def test_stopping_a_queued_job_stops_it_at_once(api, two_machines):
    job = api.post("/api/jobs", GOOD, format="json").json()
    response = api.post(f"/api/jobs/{job['id']}/stop")
    assert response.status_code == 202
    assert response.json()["status"] == "stopped"


def test_events_endpoints_validate_their_query(api, two_machines):
    job = api.post("/api/jobs", GOOD, format="json").json()
    assert api.get(f"/api/jobs/{job['id']}/logs?after=abc").status_code == 400
    assert api.get(f"/api/jobs/{job['id']}/logs?after=0").status_code == 200
    assert api.get("/api/jobs/999999/logs").status_code == 404


def test_a_checkpoint_store_the_server_does_not_have_is_refused(api, two_machines):
    response = api.post("/api/jobs", spec(checkpointing={"store": "s3"}), format="json")
    assert response.status_code == 400
    assert "TORCHYARD_STORAGE_URL" in str(response.json()["checkpointing"])
    assert api.post("/api/jobs", spec(checkpointing={"store": "local"}), format="json").status_code == 201


def test_the_recipe_list_is_what_the_spec_accepts_with_each_summary(api, two_machines):
    recipes = api.get("/api/recipes").json()
    assert [r["entrypoint"] for r in recipes] == [
        "examples/char_gpt.py", "examples/mlp_ddp.py", "examples/mlp_fsdp.py", "examples/seed001_worker.py",
    ]  # fmt: skip
    assert all(r["summary"] for r in recipes)
    assert recipes[2]["summary"].startswith("mlp_ddp's model and data trained with FSDP2 (fully_shard)")
    for recipe in recipes:
        # With what it reads of GOOD's hyperparameters (the Rust coordinator's worker reads none):
        # every recipe says what it reads (torchyard.recipe_params), and anything else is refused.
        reads = recipe_params.READS[recipe["entrypoint"]]
        hyperparameters = {key: value for key, value in GOOD["hyperparameters"].items() if key in reads}
        planned = api.post("/api/jobs/plan", spec(entrypoint=recipe["entrypoint"], hyperparameters=hyperparameters),
                           format="json")
        assert planned.status_code == 200, planned.json()


def test_it_refuses_a_stall_timeout_under_two_seconds_and_an_unknown_on_stall(api, two_machines):
    bad = spec(fault_tolerance={"stall_timeout": 0.5, "on_stall": "ignore"})
    response = api.post("/api/jobs", bad, format="json")
    assert response.status_code == 400
    errors = response.json()["fault_tolerance"]
    assert "stall_timeout" in errors and "on_stall" in errors


@pytest.mark.parametrize("given", [0.5, "fast", "30", True, 700000])
def test_a_stall_timeout_is_auto_or_a_number_of_seconds(api, two_machines, given):
    response = api.post("/api/jobs", spec(fault_tolerance={"stall_timeout": given}), format="json")
    assert response.status_code == 400
    assert response.json()["fault_tolerance"]["stall_timeout"] == ['a number of seconds (2 to 604800) or "auto".']


@pytest.mark.parametrize(("given", "stored", "seconds"), [("auto", "auto", None), (None, "auto", None), (45, 45.0, 45.0)])
def test_auto_null_and_a_number_are_stored_as_given_and_reach_the_supervisor_as_seconds(api, two_machines, given, stored,
                                                                                        seconds):
    response = api.post("/api/jobs", spec(fault_tolerance={"stall_timeout": given}), format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["spec"]["fault_tolerance"]["stall_timeout"] == stored
    job = Job.objects.get(pk=response.json()["id"])
    assert JobSpec.from_json(job.spec).fault_tolerance.stall_seconds == seconds


def test_stragglers_are_reported_by_default_and_the_window_sets_how_often_nodes_report_their_pace(api, two_machines):
    bad = api.post("/api/jobs", spec(fault_tolerance={"stragglers": "kill", "straggler_threshold": 0,
                                                      "straggler_window": 1}), format="json")
    assert bad.status_code == 400
    assert sorted(bad.json()["fault_tolerance"]) == ["straggler_threshold", "straggler_window", "stragglers"]
    paces = {}
    for policy, window in (("report", 60), ("replace", 6), ("off", 60)):
        response = api.post("/api/jobs", spec(fault_tolerance={"stragglers": policy, "straggler_window": window}),
                            format="json")
        assert response.status_code == 201, response.json()
        paces[policy] = JobSpec.from_json(Job.objects.get(pk=response.json()["id"]).spec).fault_tolerance.pace_every
    assert paces == {"report": 10.0, "replace": 2.0, "off": 0.0}


@pytest.mark.parametrize("grace", [0, 3601, "soon"])
def test_it_refuses_an_exit_grace_outside_a_second_to_an_hour(api, two_machines, grace):
    response = api.post("/api/jobs", spec(fault_tolerance={"exit_grace": grace}), format="json")
    assert response.status_code == 400
    assert list(response.json()["fault_tolerance"]) == ["exit_grace"]
