"""A job whose work is done always ends, and a silent hang is a hang: a plain DDP script (no SDK,
`destroy_process_group()` at the end) completes warm and cold, run after run; a rank held in its
teardown after every other rank exited 0 is ended within fault_tolerance.exit_grace with its stack
kept and the job completes with a warning; a 2x2 job whose ranks block without a word is declared
stalled within its stall timeout and recovered; a job that only computes or sleeps quietly, or
whose ranks wait silently on a busy one, is left alone."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from .test_bring_your_own_code import run_cli, upload

FINAL = {"completed", "failed", "stopped"}

# The scripts: job_exits/ (plain_ddp.py, silent.py, quiet.py; bench_exits.py runs plain_ddp.py too).
SCRIPTS = Path(__file__).resolve().parent / "job_exits"


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """The scripts as a user's project folder outside the repository (`torchyard run` packs its cwd)."""
    root = tmp_path_factory.mktemp("exits") / "exits"
    shutil.copytree(SCRIPTS, root, ignore=shutil.ignore_patterns("__pycache__"))
    return root


@pytest.fixture(scope="module")
def bundle(pg_stack, project, tmp_path_factory) -> str:
    sha256, _ = upload(pg_stack, project, tmp_path_factory.mktemp("exits-bundle"))
    return sha256


def job_spec(bundle: str, entrypoint: str, **extra) -> dict:
    return {"name": entrypoint.removesuffix(".py").replace("_", "-"), "code": {"bundle": bundle},
            "entrypoint": entrypoint, "resources": {"nodes": 2, "procs_per_node": 2},
            "fault_tolerance": {"max_restarts": 0}, **extra}


def job_reasons(stack, job_id: int) -> list[str]:
    return [e["reason"] for e in stack.events(job_id, "state") if e.get("scope") == "job"]


def test_a_plain_ddp_script_ends_warm_through_torchyard_run(pg_stack, project):
    pg_stack.wait_warm()
    for _ in range(3):
        result = run_cli(pg_stack, "run", "--nnodes", "2", "--nproc-per-node", "2", "--max-restarts", "0",
                         "plain_ddp.py", cwd=project)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        assert "== job completed" in result.stdout
        for rank in range(4):
            assert f"[rank {rank}] rank {rank} done" in result.stdout
    job_id = int(pg_stack.api("GET", "/api/jobs").json()[0]["id"])
    starts = [e["line"] for e in pg_stack.logs(job_id) if e["line"].startswith(("warm start", "cold start"))]
    assert len(starts) == 2 and all(line.startswith("warm start") for line in starts), starts
    assert not [e for e in pg_stack.logs(job_id) if "was still alive" in e["line"]]


def test_a_plain_ddp_script_ends_cold(pg_stack, bundle):
    for _ in range(2):
        job = pg_stack.submit(job_spec(bundle, "plain_ddp.py", distributed={"warm": False}))
        done = pg_stack.wait_job(job["id"], FINAL, timeout=180)
        assert done["status"] == "completed", f"{done['status_reason']}\n{pg_stack.job_log_tail(job['id'])}"
        starts = [e["line"] for e in pg_stack.logs(job["id"]) if e["line"].startswith(("warm start", "cold start"))]
        assert len(starts) == 2 and all(line.startswith("cold start") for line in starts), starts
        assert pg_stack.wait_no_job_processes(job["id"]) == []


@pytest.mark.parametrize("warm", [True, False])
def test_a_rank_held_in_its_teardown_is_ended_and_the_job_completes_with_a_warning(pg_stack, bundle, warm):
    job = pg_stack.submit(job_spec(bundle, "plain_ddp.py", args=["--hold-last-rank"], distributed={"warm": warm},
                                   fault_tolerance={"max_restarts": 0, "exit_grace": 3}))
    done = pg_stack.wait_job(job["id"], FINAL, timeout=180)
    assert done["status"] == "completed", f"{done['status_reason']}\n{pg_stack.job_log_tail(job['id'])}"
    assert done["restarts"] == 0
    # The warning names the rank, its machine and where it hung; the job's own completion says it too.
    assert "node 1 (local-1)" in done["status_reason"] and "global rank 3" in done["status_reason"], done["status_reason"]
    assert "was still alive 3" in done["status_reason"] or "was still alive 4" in done["status_reason"], done["status_reason"]
    node_states = [e for e in pg_stack.events(job["id"], "state") if e.get("scope") == "node" and e.get("warning")]
    assert len(node_states) == 1 and node_states[0]["node_rank"] == 1 and node_states[0]["status"] == "completed"
    # Its stack, read before it was ended, is kept with the job: the thread it waited for included.
    lines = [e["line"] for e in pg_stack.logs(job["id"]) if e["attempt"] == 0]
    stack_at = next(i for i, line in enumerate(lines) if "global rank 3" in line and "its stack" in line)
    stack = "\n".join(lines[stack_at:stack_at + 80])
    assert '"never-ends"' in stack and "_shutdown" in stack, stack
    assert pg_stack.wait_no_job_processes(job["id"]) == []


def test_every_rank_held_in_its_teardown_is_ended_once_its_script_returned(pg_stack, bundle):
    # No rank exits: each one's script returned 0 (torchyard/rank_main.py says so) and then hangs.
    job = pg_stack.submit(job_spec(bundle, "plain_ddp.py", args=["--hold-every-rank"],
                                   fault_tolerance={"max_restarts": 0, "exit_grace": 3}))
    done = pg_stack.wait_job(job["id"], FINAL, timeout=180)
    assert done["status"] == "completed", f"{done['status_reason']}\n{pg_stack.job_log_tail(job['id'])}"
    warnings = done["status_reason"].split("; warning: ")[1:]
    assert [w.split(":")[0] for w in warnings] == ["node 0 (local-0)", "node 1 (local-1)"], done["status_reason"]
    assert "global rank 0 " in warnings[0] and "global rank 1 " in warnings[0], warnings
    assert "global rank 2 " in warnings[1] and "global rank 3 " in warnings[1], warnings
    assert done["status_reason"].count("after its script returned 0") == 4, done["status_reason"]
    assert pg_stack.events(job["id"], "stalled") == []
    assert pg_stack.wait_no_job_processes(job["id"]) == []


def test_ranks_that_block_without_a_word_are_declared_stalled_and_recovered(pg_stack, bundle):
    job = pg_stack.submit(job_spec(bundle, "silent.py", fault_tolerance={
        "max_restarts": 1, "stall_timeout": 4, "on_stall": "recover"}))
    done = pg_stack.wait_job(job["id"], FINAL, timeout=240)
    assert done["status"] == "completed", f"{done['status_reason']}\n{pg_stack.job_log_tail(job['id'])}"
    assert done["restarts"] == 1 and done["attempt"] == 1
    stalled = [e for e in pg_stack.events(job["id"], "stalled") if e["attempt"] == 0]
    # Rank 0, outside any collective, is named first, with its stack; whoever else was read, waited.
    assert 0 in {e["rank"] for e in stalled}, stalled
    rank0 = next(e for e in stalled if e["rank"] == 0)
    assert "silent.py" in rank0["stack"] and rank0["waits_in"] == "" and rank0["silent"] is True, rank0
    states = [e["status"] for e in pg_stack.events(job["id"], "state") if e.get("scope") == "job"]
    assert states == ["queued", "planning", "dispatching", "running", "recovering", "dispatching", "running",
                      "completed"], states
    recovering = next(r for r in job_reasons(pg_stack, job["id"]) if "hung without a word" in r)
    assert "global rank 0" in recovering, recovering
    met = [e for e in pg_stack.logs(job["id"]) if e["attempt"] == 1 and "all 4 ranks met" in e["line"]]
    assert len(met) == 4
    assert pg_stack.wait_no_job_processes(job["id"]) == []


def test_a_job_that_computes_sleeps_or_waits_on_a_busy_rank_quietly_is_left_alone(pg_stack, bundle):
    job = pg_stack.submit({**job_spec(bundle, "quiet.py", fault_tolerance={
        "max_restarts": 0, "stall_timeout": 3, "on_stall": "recover", "exit_grace": 1}),
        "resources": {"nodes": 1, "procs_per_node": 2}})
    done = pg_stack.wait_job(job["id"], FINAL, timeout=180)
    assert done["status"] == "completed", f"{done['status_reason']}\n{pg_stack.job_log_tail(job['id'])}"
    assert done["restarts"] == 0
    assert pg_stack.events(job["id"], "stalled") == []
    assert len([e for e in pg_stack.logs(job["id"]) if "quietly done" in e["line"]]) == 2


def test_a_script_raising_the_same_error_twice_fails_after_one_retry(pg_stack, bundle):
    """Retries are spent on faults only: the same exception from the same line of the user's code, in
    two attempts, fails the job (fault_tolerance.retry_same_error 1) with its restarts left unspent."""
    job = pg_stack.submit(job_spec(bundle, "plain_ddp.py", args=["--raise-on-last-rank"],
                                   fault_tolerance={"max_restarts": 5}))
    done = pg_stack.wait_job(job["id"], FINAL, timeout=240)
    assert done["status"] == "failed", f"{done['status_reason']}\n{pg_stack.job_log_tail(job['id'])}"
    assert done["restarts"] == 1 and done["attempt"] == 1, done
    assert ("the same error twice: not retried (ValueError: a batch this script cannot take, raised at "
            "plain_ddp.py:") in done["status_reason"], done["status_reason"]
    failed = [e for e in pg_stack.events(job["id"], "state") if e.get("scope") == "node" and e.get("error")]
    assert {(e["attempt"], e["error"]["rank"], e["error"]["type"]) for e in failed if e["node_rank"] == 1} == \
        {(0, 3, "ValueError"), (1, 3, "ValueError")}, failed
    assert pg_stack.wait_no_job_processes(job["id"]) == []

