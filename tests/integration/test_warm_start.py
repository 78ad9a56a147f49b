"""Warm starts on the real stack: each local agent keeps a fork server of its training Python, and a
torchrun job's ranks are forked from it. The same job started cold (distributed.warm: false) sees the
same environment, working directory, umask, resource limits, sys.path and argv, field by field; a
warm rank killed mid-run is recovered, warm again."""

from __future__ import annotations

import json

import pytest

from .test_bring_your_own_code import upload

FINAL = {"completed", "failed", "stopped"}

PROBE = """\
import json, os, resource, sys, time
report = {
    "env": dict(os.environ), "cwd": os.getcwd(), "umask": os.umask(0), "argv": sys.argv, "path": sys.path,
    "name": __name__, "executable": sys.executable, "threads": len(os.listdir("/proc/self/task")),
    "rlimits": {n: resource.getrlimit(getattr(resource, n)) for n in dir(resource) if n.startswith("RLIMIT_")},
    "stdout_line_buffered": sys.stdout.line_buffering, "stdin": sys.stdin.read(),
}
print("PROBE " + json.dumps(report), flush=True)
"""
# Values two jobs differ in by their id (the event socket's name is a digest of the run folder).
NAME_THE_JOB = ("TORCHYARD_JOB_ID", "TORCHELASTIC_RUN_ID", "TORCHYARD_EVENT_SOCKET", "TORCHYARD_CHECKPOINT_URL")
# The one promised difference: no elastic agent holds the store, rank 0 hosts it (on the job's port).
DIFFERENT = {"TORCHELASTIC_USE_AGENT_STORE", "MASTER_PORT"}


@pytest.fixture(scope="module")
def probe_bundle(pg_stack, tmp_path_factory) -> str:
    project = tmp_path_factory.mktemp("probe") / "project"
    project.mkdir()
    (project / "probe.py").write_text(PROBE)
    sha256, _ = upload(pg_stack, project, tmp_path_factory.mktemp("packed"))
    return sha256


def probe_reports(stack, job_id: int) -> dict[int, dict]:
    found = {}
    for event in stack.logs(job_id):
        if event["line"].startswith("PROBE "):
            found[event["rank"]] = json.loads(event["line"][len("PROBE "):])
    return found


def normalised(report: dict, job_id: int, run_dir: str) -> dict:
    """The report with the job's run folder replaced, and the variables that name the job by name only."""
    report = json.loads(json.dumps(report).replace(run_dir, "<run dir>"))
    # torchrun names its log folder <run id>_<random>, the warm launcher <run id>_warm.
    error_file = report["env"]["TORCHELASTIC_ERROR_FILE"]
    report["env"]["TORCHELASTIC_ERROR_FILE"] = error_file[error_file.index("/attempt_"):]
    for name in NAME_THE_JOB:
        if name in report["env"]:
            report["env"][name] = "<job>"
    return report


def run_probe(stack, bundle: str, warm: bool) -> tuple[dict, list[str]]:
    spec = {"name": f"probe-{'warm' if warm else 'cold'}", "code": {"bundle": bundle}, "entrypoint": "probe.py",
            "resources": {"nodes": 1, "procs_per_node": 2}, "distributed": {"warm": warm},
            "fault_tolerance": {"max_restarts": 0}}
    job = stack.submit(spec)
    done = stack.wait_job(job["id"], FINAL, timeout=180)
    assert done["status"] == "completed", done["status_reason"]
    lines = [e["line"] for e in stack.logs(job["id"])]
    starts = [line for line in lines if line.startswith(("warm start", "cold start"))]
    assert starts and starts[0].startswith("warm start" if warm else "cold start"), starts or lines[-30:]
    reports = probe_reports(stack, job["id"])
    assert sorted(reports) == [0, 1], lines[-30:]
    run_dir = reports[0]["env"]["TORCHYARD_RUN_DIR"]
    return {rank: normalised(r, job["id"], run_dir) for rank, r in reports.items()}, lines


def test_a_warm_rank_sees_what_a_cold_torchrun_rank_sees(pg_stack, probe_bundle):
    pg_stack.wait_warm()
    warm, warm_lines = run_probe(pg_stack, probe_bundle, warm=True)
    cold, _ = run_probe(pg_stack, probe_bundle, warm=False)
    for rank in (0, 1):
        w, c = warm[rank], cold[rank]
        assert set(w["env"]) == set(c["env"]), set(w["env"]) ^ set(c["env"])
        differ = {k for k in w["env"] if w["env"][k] != c["env"][k]}
        assert differ <= DIFFERENT, {k: (w["env"][k], c["env"][k]) for k in differ - DIFFERENT}
        assert w["env"]["TORCHELASTIC_USE_AGENT_STORE"] == "False"
        for field in ("cwd", "umask", "argv", "path", "name", "executable", "threads", "rlimits",
                      "stdout_line_buffered", "stdin"):
            assert w[field] == c[field], (field, w[field], c[field])
    assert any("rank(s) forked from the warm pool" in line for line in warm_lines)


def test_a_warm_job_trains_and_a_killed_warm_rank_is_recovered_warm(pg_stack):
    pg_stack.wait_warm()
    job = pg_stack.submit({"name": "warm-ddp", "entrypoint": "examples/mlp_ddp.py",
                           "args": ["--steps", "400", "--step-sleep", "0.02", "--checkpoint-every", "20"],
                           "resources": {"nodes": 2, "procs_per_node": 2},
                           "fault_tolerance": {"max_restarts": 1}})
    job_id = job["id"]
    pg_stack.wait_checkpoint(job_id)
    ranks = [p for p in pg_stack.job_processes(job_id) if "mlp_ddp.py" in " ".join(p.cmdline())]
    assert len(ranks) == 4, [p.cmdline()[:4] for p in ranks]
    pg_stack.kill_rank(job_id, node_rank="1", attempt="0")
    done = pg_stack.wait_job(job_id, FINAL, timeout=240)
    assert done["status"] == "completed" and done["restarts"] == 1, done["status_reason"]
    starts = [(e["attempt"], e["line"]) for e in pg_stack.logs(job_id) if e["line"].startswith(("warm start", "cold start"))]
    assert sorted(starts) == [(a, s) for a, s in sorted(starts) if s.startswith("warm start")] and len(starts) == 4, starts
    assert pg_stack.wait_no_job_processes(job_id) == []
