"""Stalled ranks as the control plane sees them: one verdict across every node (jobs/control/stalls.py),
fed by real `stalled` and `metric` events through the ingest loop."""

from __future__ import annotations

from datetime import timedelta

import pytest
import redis
from django.utils import timezone
from factories import bring_online, make_job, make_node
from torchyard import protocol
from torchyard_server.audit.models import AuditEntry
from torchyard_server.jobs.control.reports import node_report_state
from torchyard_server.jobs.control.stalls import classify_stall, job_record_stall
from torchyard_server.jobs.models import Job, JobNode
from torchyard_server.jobs.placement.candidates import Candidate, PlanError, machine_candidates
from torchyard_server.jobs.placement.planner import plan_job
from torchyard_server.jobs.spec.jobspec import JobSpec
from torchyard_server.machines.models import Machine
from torchyard_server.machines.services import machine_quarantine, machine_record_heartbeat
from torchyard_server.streaming.ingest import Ingest
from torchyard_server.streaming.models import JobEvent

from jobs.planner.test_plan_skip_reasons import spec as plan_spec


def stalled(step: int, state: str = "sleeping", *, waits_in: str | None = None, frame: str | None = None,
            machine: str = "m1", node_rank: int = 0) -> dict:
    return {"step": step, "process_state": state, "waits_in": waits_in, "frame": frame, "machine": machine,
            "node_rank": node_rank}


BACKWARD = "_engine_run_backward (torch/autograd/graph.py:979)"


def test_every_rank_stopped_at_one_step_is_a_hung_collective():
    kind, summary, culprits = classify_stall({"0": stalled(41), "1": stalled(41)}, {"0": 41, "1": 41}, 2)
    assert (kind, summary, culprits) == ("collective", "all 2 ranks stopped together at step 41: a hung collective", [])


def test_a_stopped_rank_is_named_with_its_machine_while_the_others_wait_in_a_collective():
    ranks = {"0": stalled(40, waits_in=BACKWARD, machine="m1"),
             "1": stalled(40, waits_in=BACKWARD, machine="m1"),
             "2": stalled(40, "stopped", waits_in="", frame="train (mlp_ddp.py:138)", machine="m2", node_rank=1),
             "3": stalled(40, waits_in=BACKWARD, machine="m2", node_rank=1)}
    kind, summary, [culprit] = classify_stall(ranks, {r: 40 for r in ranks}, 4)
    assert kind == "culprit"
    assert summary == ("rank 2 on machine m2 (process stopped, SIGSTOP?) holds the job: "
                       "ranks 0, 1, 3 wait in a collective at step 40")
    assert culprit == {"rank": 2, "ranks": [2], "machine": "m2", "node_rank": 1, "cause": "process",
                       "evidence": "process stopped, SIGSTOP?"}


def test_a_stopped_rank_is_named_before_the_others_report():
    kind, summary, _ = classify_stall({"1": stalled(7, "stopped")}, {"0": 7, "1": 7, "2": 7}, 3)
    assert (kind, summary) == ("culprit", "rank 1 on machine m1 (process stopped, SIGSTOP?) holds the job: "
                                          "ranks 0, 2 wait at step 7")


def test_a_rank_in_uninterruptible_sleep_is_named():
    _, summary, [culprit] = classify_stall({"0": stalled(9, waits_in="all_reduce (torch/distributed/c.py:1)"),
                                            "1": stalled(9, "disk-sleep", frame="save (ckpt.py:3)")}, {}, 2)
    assert culprit["cause"] == "process"
    assert summary.startswith("rank 1 on machine m1 (process in uninterruptible sleep")


def test_a_stack_outside_any_collective_is_named_when_the_others_wait_in_one():
    ranks = {"0": stalled(12, waits_in=BACKWARD), "1": stalled(12, waits_in="", frame="load (data.py:88)", node_rank=1)}
    kind, summary, [culprit] = classify_stall(ranks, {}, 2)
    assert (kind, culprit["cause"]) == ("culprit", "stack")
    assert summary == ("rank 1 on machine m1 (outside any collective, in load (data.py:88)) holds the job: "
                       "rank 0 waits in a collective at step 12")


def test_stacks_name_no_one_when_no_rank_waits_in_a_collective_or_none_could_be_read():
    assert classify_stall({"0": stalled(5, waits_in=""), "1": stalled(5, waits_in="")}, {}, 2)[0] == "collective"
    assert classify_stall({"0": stalled(5, waits_in=BACKWARD), "1": stalled(5)}, {}, 2)[0] == "collective"


def test_a_node_gone_quiet_is_named_by_its_machine():
    quiet = [{"node_rank": 1, "machine": "m2", "ranks": [2, 3], "silent_for": 12}]
    ranks = {"0": stalled(30, waits_in=BACKWARD), "1": stalled(30, waits_in=BACKWARD)}
    kind, summary, [culprit] = classify_stall(ranks, {}, 4, quiet)
    assert (kind, culprit["rank"], culprit["ranks"]) == ("culprit", None, [2, 3])
    assert summary == ("machine m2 (node 1, ranks 2-3: no heartbeat for 12 s) holds the job: "
                       "ranks 0, 1 wait in a collective at step 30")


def test_a_rank_behind_the_others_is_a_straggler():
    kind, summary, _ = classify_stall({"2": stalled(10)}, {"0": 14, "1": 15, "2": 10, "3": 14}, 4)
    assert (kind, summary) == ("straggler", "rank 2 stalled at step 10 while rank 1 reached step 15: a straggler")


def test_one_rank_reported_first_is_named_alone_until_the_others_say_more():
    assert classify_stall({"1": stalled(7)}, {"0": 7, "1": 7}, 2) == ("rank", "rank 1 stalled at step 7", [])


def drain(ingest: Ingest) -> None:
    ingest.step()  # its own backlog first, then what waits
    while ingest.step():
        pass


@pytest.mark.django_db(transaction=True)
def test_ingested_stalls_build_the_jobs_verdict_and_progress_clears_it(redis_url, owner):
    client = redis.Redis.from_url(redis_url)
    client.delete(protocol.EVENT_STREAM)
    job = make_job(name="j", owner=owner, world_size=2, progress={})
    ingest = Ingest(redis_url)
    ingest.ensure_group()
    seq = iter(range(1, 100))

    def send(kind: str, rank: int, **payload) -> None:
        event = {"type": kind, "job": job.pk, "attempt": 0, "node": None, "node_rank": rank, "rank": rank,
                 "seq": None, "key": f"s{job.pk}-{next(seq)}", "ts": 1_700_000_000.0, **payload}
        client.xadd(protocol.EVENT_STREAM, protocol.encode_event(event))

    try:
        for rank in (0, 1):
            send(protocol.METRIC, rank, step=41, loss=0.5)
        send(protocol.STALLED, 1, step=41, stalled_for=8.0, process_state="stopped", stack="...", last_line="x")
        drain(ingest)
        stall = Job.objects.get(pk=job.pk).progress["stall"]
        assert stall["kind"] == "culprit" and stall["ranks"]["1"]["process_state"] == "stopped"
        assert stall["ranks"]["1"]["event"] == JobEvent.objects.get(job=job, type="stalled").pk

        send(protocol.STALLED, 0, step=41, stalled_for=8.2, process_state="sleeping", stack="...", last_line="y",
             waits_in=BACKWARD, frame=BACKWARD)
        drain(ingest)
        stall = Job.objects.get(pk=job.pk).progress["stall"]
        # Events of no node (as these) name no machine.
        assert stall["summary"] == "rank 1 (process stopped, SIGSTOP?) holds the job: rank 0 waits in a collective at step 41"
        assert stall["ranks"]["0"]["waits_in"] == BACKWARD
        assert "quarantined" not in stall  # on_stall: report

        for rank in (0, 1):  # they move again (a SIGCONT, say): the verdict goes
            send(protocol.METRIC, rank, step=42, loss=0.4)
        drain(ingest)
        progress = Job.objects.get(pk=job.pk).progress
        assert "stall" not in progress and progress["step_by_rank"] == {"0": 42, "1": 42}
    finally:
        client.delete(protocol.EVENT_STREAM)


@pytest.mark.django_db(transaction=True)
def test_under_recover_the_culprits_machine_is_quarantined_once_and_planned_on_never(owner, api):
    (m1, token1), (m2, _) = bring_online("m1"), bring_online("m2")
    job = Job.objects.create(name="j", owner=owner, status=Job.Status.RUNNING, attempt=0, world_size=4, progress={},
                             spec={"fault_tolerance": {"max_restarts": 1, "heartbeat_timeout": 10, "on_stall": "recover"}})
    nodes = [make_node(job, node_rank=i, nproc=2, machine=m, status=JobNode.Status.RUNNING,
                       last_heartbeat=timezone.now()) for i, m in enumerate((m1, m2))]

    def report(event_id: int, rank: int, state: str, waits_in: str) -> None:
        job_record_stall(job_id=job.pk, event_id=event_id, attempt=0, node_id=nodes[rank // 2].pk, rank=rank,
                         payload={"step": 40, "stalled_for": 15.2, "process_state": state, "waits_in": waits_in,
                                  "frame": "train (mlp_ddp.py:138)", "timeout": 15.0,
                                  "timeout_basis": "auto: 2 x the p95 step time (0.2 s between the last 64 steps reported), at least 15 s"})

    report(1, 0, "sleeping", BACKWARD)
    report(2, 1, "stopped", "")
    report(3, 2, "sleeping", BACKWARD)  # a second report of the same verdict quarantines nothing again
    stall = Job.objects.get(pk=job.pk).progress["stall"]
    assert stall["summary"] == ("rank 1 on machine m1 (process stopped, SIGSTOP?) holds the job: "
                                "ranks 0, 2, 3 wait at step 40")
    assert stall["quarantined"] == ["m1"]
    # The evidence says which deadline applied.
    assert stall["ranks"]["1"]["timeout"] == 15.0 and stall["ranks"]["1"]["timeout_basis"].startswith("auto: 2 x")
    m1.refresh_from_db()
    m2.refresh_from_db()
    reason = f"rank 1 on machine m1 (process stopped, SIGSTOP?) held job #{job.pk} (attempt 0) at step 40"
    assert (m1.status, m1.quarantine_reason, m1.quarantine_job) == (Machine.Status.QUARANTINED, reason, job.pk)
    assert m1.probation_until > timezone.now() + timedelta(minutes=9)
    assert (m2.status, m2.quarantined_at) == (Machine.Status.ONLINE, None)
    entry = AuditEntry.objects.get(action="machine.quarantine", target_id=str(m1.pk))
    assert (entry.actor_label, entry.detail) == ("system", {"reason": reason, "job": job.pk})

    # The attempt ends (on_stall: recover failed node 0): the reason names who held the job.
    node_report_state(event={"node": nodes[0].pk, "status": protocol.NODE_FAILED, "exit_code": 1, "reason": (
        "node rank 0: global rank 1 stalled: no new step for 15.2 s after step 40 (its process is stopped); "
        "treated as a failure (on_stall: recover)")})
    job.refresh_from_db()
    assert job.status == Job.Status.RECOVERING
    assert "\nstall verdict: rank 1 on machine m1 (process stopped, SIGSTOP?) holds the job" in job.status_reason

    # Planned on never: a one-node job goes to m2 and says why not m1; a two-node job waits, saying so.
    candidates = machine_candidates()
    one = plan_job(JobSpec.from_json(plan_spec()), candidates, pick_port=lambda m: 29500)
    assert [n.machine_name for n in one.nodes] == ["m2"]
    assert {e["machine_name"]: e["reason"] for e in one.skipped}["m1"] == f"quarantined: {reason}"
    with pytest.raises(PlanError) as refused:
        plan_job(JobSpec.from_json(plan_spec(nodes=2)), candidates, pick_port=lambda m: 29500)
    assert {e["machine_name"]: e["reason"] for e in refused.value.skipped}["m1"] == f"quarantined: {reason}"

    # Its heartbeats keep it quarantined, however long after the probation; shown in the API, one machine or all.
    Machine.objects.filter(pk=m1.pk).update(probation_until=timezone.now() - timedelta(seconds=1))
    machine_record_heartbeat(event={"machine": m1.pk, "token": token1, "agent_version": "test"})
    listed = {m["name"]: m for m in api.get("/api/machines").json()}
    assert listed["m1"]["status"] == "quarantined" and listed["m1"]["quarantine_reason"] == reason
    assert listed["m1"]["quarantine_job"] == job.pk and listed["m1"]["quarantined_at"]
    assert listed["m2"]["quarantined_at"] is None and listed["m2"]["quarantine_reason"] == ""
    assert api.get(f"/api/machines/{m1.pk}").json()["quarantined_at"] == listed["m1"]["quarantined_at"]


def test_a_rank_named_by_its_stack_alone_leaves_its_machine_in_service(owner):
    """Outside any collective while the others wait in one: the script's own deadlock, which would
    hang on any machine. The verdict names it; its machine is not quarantined."""
    (m1, _), (m2, _) = bring_online("m1"), bring_online("m2")
    job = Job.objects.create(name="j", owner=owner, status=Job.Status.RUNNING, attempt=0, world_size=2, progress={},
                             spec={"fault_tolerance": {"on_stall": "recover"}})
    nodes = [make_node(job, node_rank=i, machine=m, status=JobNode.Status.RUNNING, last_heartbeat=timezone.now())
             for i, m in enumerate((m1, m2))]
    for rank, waits_in in ((0, ""), (1, BACKWARD)):
        job_record_stall(job_id=job.pk, event_id=rank + 1, attempt=0, node_id=nodes[rank].pk, rank=rank,
                         payload={"step": 0, "stalled_for": 4.1, "process_state": "sleeping", "waits_in": waits_in,
                                  "frame": "Condition.wait (threading.py:327)"})
    stall = Job.objects.get(pk=job.pk).progress["stall"]
    assert [(c["rank"], c["cause"]) for c in stall["culprits"]] == [(0, "stack")]
    assert stall["quarantined"] == []
    assert set(Machine.objects.values_list("status", flat=True)) == {Machine.Status.ONLINE}


@pytest.mark.django_db(transaction=True)
def test_an_operator_releases_a_quarantine_and_cannot_set_one(staff_api):
    machine, _ = bring_online("m1")
    assert machine_quarantine(machine_id=machine.pk, reason="rank 1 held job #1", job_id=1)
    refused = staff_api.patch(f"/api/machines/{machine.pk}", {"quarantined": True}, format="json")
    assert refused.status_code == 400 and "quarantined" in refused.json()
    answer = staff_api.patch(f"/api/machines/{machine.pk}", {"quarantined": False}, format="json")
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert (body["status"], body["quarantined_at"], body["quarantine_reason"], body["probation_until"]) == (
        "online", None, "", None)
    entry = AuditEntry.objects.get(action="machine.release", target_id=str(machine.pk))
    assert entry.actor_label == "sam" and entry.detail == {"quarantine_reason": "rank 1 held job #1",
                                                            "why": "released by an operator"}


def test_a_quarantined_machine_never_makes_up_an_elastic_jobs_least():
    machines = [Candidate(1, "a", "h1", "online"), Candidate(2, "b", "h2", "online"),
                Candidate(3, "c", "h3", "quarantined", quarantine_reason="rank 0 held job #2")]
    elastic = JobSpec.from_json(plan_spec(nodes=3, min_nodes=2))
    assert [n.machine_name for n in plan_job(elastic, machines, pick_port=lambda m: 1).nodes] == ["a", "b"]
    machines[1].status = "offline"
    with pytest.raises(PlanError) as refused:
        plan_job(elastic, machines, pick_port=lambda m: 1)
    assert {e["machine_name"]: e["reason"] for e in refused.value.skipped}["c"] == "quarantined: rank 0 held job #2"


@pytest.mark.django_db(transaction=True)
def test_a_node_whose_heartbeats_stopped_is_named_by_its_machine(owner):
    job = Job.objects.create(name="j", owner=owner, status=Job.Status.RUNNING, attempt=0, world_size=2, progress={},
                             spec={"fault_tolerance": {"heartbeat_timeout": 10, "on_stall": "report"}})
    beats = (timezone.now(), timezone.now() - timedelta(seconds=30))
    nodes = [make_node(job, node_rank=i, machine_name=f"m{i + 1}", host="h", status=JobNode.Status.RUNNING,
                       last_heartbeat=beat)
             for i, beat in enumerate(beats)]
    job_record_stall(job_id=job.pk, event_id=1, attempt=0, node_id=nodes[0].pk, rank=0,
                     payload={"step": 12, "process_state": "sleeping", "waits_in": BACKWARD})
    stall = Job.objects.get(pk=job.pk).progress["stall"]
    assert stall["summary"].startswith("machine m2 (node 1, rank 1: no heartbeat for 3")
    assert stall["summary"].endswith(") holds the job: rank 0 waits in a collective at step 12")
    assert stall["culprits"][0]["cause"] == "heartbeat" and "quarantined" not in stall
