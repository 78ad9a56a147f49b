"""distributed.launcher in a JobSpec: torchrun (default), none (one plain process per node) and command
(the user's own argv per node); each refused with a 400 naming the field when it cannot run."""

import pytest
from torchyard_server.bundles.models import Bundle
from torchyard_server.jobs.control.launch import launch_payload as _launch_payload
from torchyard_server.jobs.models import Job, JobNode
from torchyard_server.jobs.spec.jobspec import JobSpec
from torchyard_server.jobs.spec.plan import Plan

pytestmark = pytest.mark.django_db

SHA = "c" * 64
COMMAND = ["python", "-m", "torch.distributed.run", "--nnodes", "${NNODES}", "--node-rank", "${NODE_RANK}",
           "--nproc-per-node", "2", "--master-addr", "${MASTER_ADDR}", "--master-port", "${MASTER_PORT}", "train.py"]


@pytest.fixture
def bundle(owner):
    made = Bundle.objects.create(sha256=SHA, size=10, unpacked_size=10, files=[{"path": "train.py", "size": 1}])
    made.owners.add(owner)
    return made


def submit(api, **fields):
    spec = {"name": "l", "resources": {"nodes": 2, "procs_per_node": 1}, **fields}
    return api.post("/api/jobs", spec, format="json")


def test_torchrun_is_the_default_launcher(api, two_machines):
    response = submit(api, entrypoint="examples/mlp_ddp.py")
    assert response.status_code == 201, response.json()
    assert response.json()["spec"]["distributed"]["launcher"] == "torchrun"


def test_launcher_none_runs_an_entrypoint_once_per_node_and_the_plan_says_so(api, two_machines, bundle):
    response = submit(api, code={"bundle": SHA}, entrypoint="train.py", distributed={"launcher": "none"})
    assert response.status_code == 201, response.json()
    plan = api.post("/api/jobs/plan", {"name": "l", "code": {"bundle": SHA}, "entrypoint": "train.py",
                                       "resources": {"workers": 2}, "distributed": {"launcher": "none"}},
                    format="json")
    assert plan.status_code == 200, plan.json()
    assert plan.json()["launcher"] == "none"
    assert [n["nproc"] for n in plan.json()["nodes"]] == [1, 1]


def test_launcher_none_refuses_more_than_one_process_per_node(api, two_machines):
    response = submit(api, entrypoint="examples/mlp_ddp.py", resources={"nodes": 1, "procs_per_node": 2},
                      distributed={"launcher": "none"})
    assert response.status_code == 400
    assert "procs_per_node must be 1" in response.json()["resources"]["procs_per_node"][0]


def test_launcher_none_with_more_workers_than_machines_is_refused_with_the_reason(api, two_machines):
    response = submit(api, entrypoint="examples/mlp_ddp.py", resources={"workers": 4},
                      distributed={"launcher": "none"})
    assert response.status_code == 400
    assert "needs 4 online machines" in str(response.json())


def test_a_command_job_needs_no_entrypoint(api, two_machines):
    response = submit(api, distributed={"launcher": "command", "command": COMMAND})
    assert response.status_code == 201, response.json()
    assert response.json()["spec"]["distributed"]["command"] == COMMAND


def test_a_command_job_with_code_runs_from_it(api, two_machines, bundle):
    response = submit(api, code={"bundle": SHA}, distributed={"launcher": "command", "command": COMMAND})
    assert response.status_code == 201, response.json()
    assert response.json()["spec"]["code"]["bundle"] == SHA


@pytest.mark.parametrize(("distributed", "field"), [
    ({"launcher": "command"}, "command"),
    ({"launcher": "command", "command": []}, "command"),
    ({"launcher": "command", "command": [""]}, "command"),
    ({"launcher": "command", "command": "python train.py"}, "command"),
    ({"launcher": "command", "command": ["python", 3]}, None),
    ({"launcher": "command", "command": ["python", "a\x00b"]}, "command"),
    ({"launcher": "command", "command": ["x" * 5000]}, "command"),
    ({"launcher": "command", "command": ["x"] * 300}, "command"),
    ({"launcher": "torchrun", "command": ["python", "x.py"]}, "command"),
    ({"launcher": "none", "command": ["python", "x.py"]}, "command"),
    ({"launcher": "mpirun"}, "launcher"),
])
def test_bad_commands_are_refused_field_by_field(api, two_machines, distributed, field):
    response = submit(api, distributed=distributed)
    assert response.status_code == 400, response.json()
    if field is not None:
        assert field in response.json()["distributed"], response.json()
    assert not Job.objects.exists()


def test_a_command_job_refuses_an_entrypoint_it_would_not_run(api, two_machines):
    response = submit(api, entrypoint="examples/mlp_ddp.py", distributed={"launcher": "command", "command": COMMAND})
    assert response.status_code == 400
    assert "give no entrypoint" in response.json()["entrypoint"][0]


def test_the_launch_payload_carries_the_launcher_the_command_and_the_peers(api, two_machines):
    response = submit(api, distributed={"launcher": "command", "command": COMMAND})
    job = Job.objects.get(pk=response.json()["id"])
    plan = {"nnodes": 2, "procs_per_node": 2, "world_size": 4, "master_addr": "10.0.0.1", "master_port": 29500,
            "backend": "gloo", "nodes": [
                {"node_rank": 1, "host": "10.0.0.2", "machine_name": "b"},
                {"node_rank": 0, "host": "10.0.0.1", "machine_name": "a"}]}
    node = JobNode.objects.create(job=job, attempt=0, machine_name="b", host="10.0.0.2", node_rank=1, nproc=2,
                                  rank_start=2, rank_end=3)
    payload = _launch_payload(job, JobSpec.from_json(job.spec), Plan.from_json(plan), node, "")
    assert payload["launcher"] == "command" and payload["command"] == COMMAND
    assert payload["peers"] == [{"node_rank": 0, "host": "10.0.0.1", "machine": "a"},
                                {"node_rank": 1, "host": "10.0.0.2", "machine": "b"}]


def test_membership_goes_to_every_live_node_and_a_failure_reaches_them_before_the_stops(
        api, two_machines, monkeypatch, django_capture_on_commit_callbacks):
    from torchyard import protocol
    from torchyard_server.celery import app as celery_app
    from torchyard_server.jobs.control import membership
    from torchyard_server.jobs.control.queue_pass import job_schedule
    from torchyard_server.jobs.control.reports import node_report_state

    response = submit(api, entrypoint="examples/mlp_ddp.py", fault_tolerance={"max_restarts": 0})
    sent: list[tuple[str, dict]] = []
    record = lambda name, **kw: sent.append((name, kw))  # noqa: E731
    monkeypatch.setattr(celery_app, "send_task", record)
    monkeypatch.setattr(membership.celery_app, "send_task", record)
    with django_capture_on_commit_callbacks(execute=True):
        job_schedule(job_id=response.json()["id"])
    node0, node1 = JobNode.objects.filter(job_id=response.json()["id"]).order_by("node_rank")
    sent.clear()
    with django_capture_on_commit_callbacks(execute=True):
        node_report_state(event={"node": node0.pk, "status": protocol.NODE_RUNNING, "pid": 1})
    updates = [kw for name, kw in sent if name == protocol.TASK_UPDATE_PEERS]
    assert {u["queue"] for u in updates} == {protocol.machine_queue(node0.machine_id),
                                             protocol.machine_queue(node1.machine_id)}
    first = updates[0]["kwargs"]["membership"]
    assert [(n["node_rank"], n["host"], n["machine"], n["status"]) for n in first["nodes"]] == [
        (0, node0.host, node0.machine_name, "running"), (1, node1.host, node1.machine_name, "launching")]

    sent.clear()
    with django_capture_on_commit_callbacks(execute=True):
        node_report_state(event={"node": node0.pk, "status": protocol.NODE_FAILED, "exit_code": 1, "reason": "boom"})
    names = [(name, kw["queue"]) for name, kw in sent]
    # Node 1 alone is still live: it hears that node 0 failed, and only then is it stopped.
    assert names == [(protocol.TASK_UPDATE_PEERS, protocol.machine_queue(node1.machine_id)),
                     (protocol.TASK_STOP_NODE, protocol.machine_queue(node1.machine_id))]
    later = sent[0][1]["kwargs"]["membership"]
    assert later["version"] > first["version"] and later["nodes"][0]["status"] == "failed"


# fault_tolerance.mode in_place: the warm launcher replaces one rank of a fixed, data-parallel world.
def test_in_place_is_accepted_for_a_torchrun_job_and_reaches_the_script_config(api, two_machines):
    response = submit(api, entrypoint="examples/mlp_ddp.py", fault_tolerance={"mode": "in_place", "max_restarts": 2})
    assert response.status_code == 201, response.json()
    assert response.json()["spec"]["fault_tolerance"]["mode"] == "in_place"
    job = Job.objects.get(pk=response.json()["id"])
    plan = {"nnodes": 2, "procs_per_node": 1, "world_size": 2, "master_addr": "10.0.0.1", "master_port": 29500,
            "backend": "gloo", "nodes": [{"node_rank": 0, "host": "10.0.0.1", "machine_name": "a"},
                                         {"node_rank": 1, "host": "10.0.0.2", "machine_name": "b"}]}
    node = JobNode.objects.create(job=job, attempt=0, machine_name="a", host="10.0.0.1", node_rank=0, nproc=1,
                                  rank_start=0, rank_end=0)
    config = _launch_payload(job, JobSpec.from_json(job.spec), Plan.from_json(plan), node, "")["config"]
    assert config["fault_tolerance"] == {"mode": "in_place", "max_restarts": 2}


@pytest.mark.parametrize("fields, says", [
    ({"distributed": {"launcher": "none"}}, "launcher none restarts the attempt"),
    ({"distributed": {"warm": False}}, "leave distributed.warm true"),
    ({"resources": {"nodes": "1:2", "procs_per_node": 1}}, "in_place is for a fixed world size"),
    ({"compression": {"enabled": True}}, "disable compression"),
    ({"entrypoint": "examples/mlp_fsdp.py"}, "examples/mlp_fsdp.py trains without sdk.resilient"),
    ({"entrypoint": "examples/char_gpt.py"}, "in_place runs examples/mlp_ddp.py"),
])
def test_in_place_is_refused_where_a_rank_cannot_be_replaced_alone(api, two_machines, fields, says):
    response = submit(api, **{"entrypoint": "examples/mlp_ddp.py", "fault_tolerance": {"mode": "in_place"}, **fields})
    assert response.status_code == 400, response.json()
    assert says in response.json()["fault_tolerance"]["mode"][0], response.json()
