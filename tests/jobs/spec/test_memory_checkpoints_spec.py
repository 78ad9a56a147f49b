"""checkpointing.memory in a JobSpec, a plan and a launch: refused with the reason where it cannot hold,
the budget asked of every machine at plan time, each node's holders (its own machine, then its buddies
around the ring) in its launch, and a recovery's choice of the newest checkpoint that survives."""

import pytest
from torchyard_server.checkpoints.models import CheckpointManifest
from torchyard_server.checkpoints.selectors import latest_good_manifest_uri
from torchyard_server.checkpoints.services import checkpoint_record
from torchyard_server.jobs.control.launch import launch_payload
from torchyard_server.jobs.control.memory import buddies, memory_key
from torchyard_server.jobs.models import Job, JobNode
from torchyard_server.jobs.spec.jobspec import JobSpec
from torchyard_server.jobs.spec.plan import Plan
from torchyard_server.machines.models import Machine

pytestmark = pytest.mark.django_db

MEMORY = {"every_n_steps": 1, "replicas": 1, "budget": 1 << 30}


def submit(api, nodes=2, **fields):
    spec = {"name": "m", "entrypoint": "examples/mlp_ddp.py", "resources": {"nodes": nodes, "procs_per_node": 1},
            **fields}
    return api.post("/api/jobs", spec, format="json")


def test_memory_checkpoints_are_stored_with_their_defaults(api, two_machines):
    response = submit(api, checkpointing={"memory": {}})
    assert response.status_code == 201, response.json()
    assert response.json()["spec"]["checkpointing"]["memory"] == {"every_n_steps": 1, "replicas": 1, "budget": 4 << 30}
    assert "memory" not in submit(api).json()["spec"]["checkpointing"]


@pytest.mark.parametrize(("fields", "nodes", "where", "says"), [
    ({"checkpointing": {"memory": {"replicas": 1}}}, 1, ("replicas",), "which runs on 1 node: give it more nodes"),
    ({"checkpointing": {"memory": {"replicas": 2}}}, 2, ("replicas",), "2 copies on other machines"),
    ({"checkpointing": {"memory": {"replica": 1}}}, 2, ("replica",), "unknown field (did you mean replicas?)"),
    ({"checkpointing": {"memory": {"budget": 1000}}}, 2, ("budget",), "greater than or equal to 1048576"),
    ({"checkpointing": {"memory": {}}, "entrypoint": "examples/mlp_fsdp.py"}, 2, (), "shards its state"),
])
def test_what_memory_checkpoints_cannot_hold_is_refused_with_the_reason(api, two_machines, fields, nodes, where, says):
    response = submit(api, nodes=nodes, **fields)
    assert response.status_code == 400, response.json()
    found = response.json()["checkpointing"]["memory"]
    for key in where:
        found = found[key]
    assert says in " ".join(found), response.json()


def test_a_budget_the_machines_cannot_hold_is_refused_at_plan_time(api, two_machines):
    # Each machine has 8 GiB, 10% in use (factories.bring_online).
    plan = api.post("/api/jobs/plan", {"name": "m", "entrypoint": "examples/mlp_ddp.py",
                                       "resources": {"nodes": 2, "procs_per_node": 1, "memory_per_node": 4 << 30},
                                       "checkpointing": {"memory": {"budget": 4 << 30}}}, format="json")
    assert plan.status_code == 400, plan.json()
    assert {s["reason"] for s in plan.json()["skipped"]} == {
        "7.2 GiB of memory free, 8.0 GiB asked (4.0 GiB of them the memory checkpoints' budget)"}
    assert api.post("/api/jobs/plan", {"name": "m", "entrypoint": "examples/mlp_ddp.py",
                                       "resources": {"nodes": 2, "procs_per_node": 1},
                                       "checkpointing": {"memory": {"budget": 4 << 30}}},
                    format="json").status_code == 200


def _plan(machines: list[Machine]) -> Plan:
    return Plan.from_json({"nnodes": len(machines), "procs_per_node": 1, "world_size": len(machines),
                           "master_addr": machines[0].host, "master_port": 29500, "backend": "gloo",
                           "nodes": [{"node_rank": i, "host": m.host, "machine_id": m.pk, "machine_name": m.name}
                                     for i, m in enumerate(machines)]})


def test_each_node_saves_to_its_own_machine_then_its_buddy_around_the_ring(api, two_machines):
    from factories import bring_online

    machines = [*two_machines, bring_online("gpu-c")[0]]
    for port, machine in enumerate(machines, start=7001):
        machine.capabilities["memory_port"] = port
        machine.save()
    job = Job.objects.get(pk=submit(api, nodes=3, checkpointing={"memory": MEMORY}).json()["id"])
    plan = _plan(machines)
    assert [buddies(plan, rank, 1) for rank in range(3)] == [[machines[1].pk], [machines[2].pk], [machines[0].pk]]
    assert buddies(plan, 0, 2) == [machines[1].pk, machines[2].pk]
    node = JobNode.objects.create(job=job, attempt=0, machine=machines[2], machine_name=machines[2].name,
                                  host=machines[2].host, node_rank=2, nproc=1, rank_start=2, rank_end=2)
    memory = launch_payload(job, JobSpec.from_json(job.spec), plan, node, "")["memory"]
    assert [(h["machine"], h["host"], h["port"]) for h in memory["holders"]] == [
        (machines[2].name, machines[2].host, 7003), (machines[0].name, machines[0].host, 7001)]
    assert memory["key"] == memory_key(job.pk) != memory_key(job.pk + 1)
    assert (memory["budget"], memory["every_n_steps"], memory["replicas"], "resume" in memory) == (1 << 30, 1, 1, False)

    # A recovery from memory: the newest checkpoint a living machine holds, this node's own copy first.
    def commit(step: int, holders: list[str] | None) -> None:
        files = [{"path": "state.pt", "size": 10, "sha256": "ab", **({"holders": holders} if holders else {})}]
        uri = f"memory://job-{job.pk}/step-{step}" if holders else f"file:///ckpt/step-{step}/manifest.json"
        checkpoint_record(event={"type": "checkpoint", "job": job.pk, "attempt": 0, "step": step, "uri": uri,
                                 "manifest": {"step": step, "files": files, **({"tier": "memory"} if holders else {})}})

    commit(10, None)
    commit(11, [machines[0].name, machines[2].name])
    commit(12, [machines[1].name])
    Machine.objects.filter(pk=machines[1].pk).update(status=Machine.Status.OFFLINE)
    uri = latest_good_manifest_uri(job_id=job.pk)
    assert uri == f"memory://job-{job.pk}/step-11"
    resume = launch_payload(job, JobSpec.from_json(job.spec), plan, node, uri)["memory"]["resume"]
    assert resume["manifest"]["step"] == 11
    assert [h["machine"] for h in resume["holders"]] == [machines[2].name, machines[0].name]
    # Both holders gone: the store's newest.
    Machine.objects.filter(pk__in=[machines[0].pk, machines[2].pk]).update(status=Machine.Status.OFFLINE)
    assert latest_good_manifest_uri(job_id=job.pk) == "file:///ckpt/step-10/manifest.json"
    tiers = dict(CheckpointManifest.objects.filter(job=job).values_list("step", "tier"))
    assert tiers == {10: "disk", 11: "memory", 12: "memory"}
