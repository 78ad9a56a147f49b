"""Python functions on the cluster (torchyard.fn, the decorators): each case runs a plain Python
process in a user directory the test creates, as a researcher's script or notebook would, against a
real stack with two local agents and real torchrun ranks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from torchyard.client.http import ApiClient
from torchyard.functions.remote import FunctionError, check_python

RESULTS = "RESULTS "

TRAIN = '''
import json
import sys
import time

import torch
import torch.distributed as dist

import helpers
import torchyard as ty


def train(lr, fail_rank=None):
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    total = torch.tensor([rank + 1.0])
    dist.all_reduce(total)
    with open("data/values.txt") as handle:
        value = int(handle.read())
    dist.barrier()
    if rank == fail_rank:
        raise ValueError(f"rank {rank} refuses lr={lr}")
    dist.barrier()
    dist.destroy_process_group()
    return {"rank": rank, "lr": lr, "scaled": helpers.scale(value), "sum": total.item()}


def sleepy(seconds):
    import time
    time.sleep(seconds)
    return "woke"


def big():
    return b"x" * 20000


def length(data):
    return [len(data), data.count(1)]


def flaky():
    import os
    import time
    if os.environ["TORCHYARD_ATTEMPT"] == "0":
        time.sleep(120)  # killed meanwhile: the job recovers and calls it again
    return (int(os.environ["RANK"]), int(os.environ["TORCHYARD_ATTEMPT"]))


if __name__ == "__main__":
    case = sys.argv[1]
    compute = ty.Compute(gpus=0, cpus=1, memory="64Mi")
    if case == "call":
        remote = ty.fn(train).to(compute).distribute(framework="pytorch", workers=2, nproc_per_node=2)
        print("''' + RESULTS + '''" + json.dumps(remote(0.1)), flush=True)
    elif case == "raise":
        remote = ty.fn(train).to(compute).distribute(framework="pytorch", workers=2, nproc_per_node=2)
        try:
            remote(0.5, fail_rank=3)
        except ty.RemoteError as exc:
            print("''' + RESULTS + '''" + json.dumps({"rank": exc.rank, "node_rank": exc.node_rank,
                  "machine": exc.machine, "job": exc.job_id, "text": str(exc)}), flush=True)
    elif case == "submit-stop":
        run = ty.fn(sleepy).distribute(workers=2).submit(120)
        print("''' + RESULTS + '''" + json.dumps({"job": run.job_id}), flush=True)
        sys.stdin.readline()  # the test says when the job runs
        run.stop()
        try:
            run.result(timeout=60)
        except ty.RemoteError as exc:
            print("''' + RESULTS + '''" + json.dumps({"stopped": str(exc)}), flush=True)
    elif case == "recover":
        print("''' + RESULTS + '''" + json.dumps(ty.fn(flaky).distribute(workers=2, max_restarts=1)()), flush=True)
    elif case == "ones":  # an argument that compresses thousands of times: no bomb
        print("''' + RESULTS + '''" + json.dumps(ty.fn(length).distribute(workers=1)(b"\\x01" * (40 << 20))), flush=True)
    elif case == "too-big":
        try:
            ty.fn(big, result_max_bytes=1000).distribute(workers=1)()
        except ty.RemoteError as exc:
            print("''' + RESULTS + '''" + json.dumps({"text": str(exc), "type": exc.error_type}), flush=True)
    elif case == "unpicklable":
        import threading
        lock = threading.Lock()
        try:
            ty.fn(lambda: lock).distribute(workers=1)()
        except ty.FunctionError as exc:
            print("''' + RESULTS + '''" + json.dumps({"text": str(exc)}), flush=True)
'''

DECORATED = '''
import torchyard as ty


@ty.compute(cpus=1)
@ty.distribute(framework="pytorch", workers=2)
def where(tag):
    import os
    import socket

    import decorated  # this very file, imported on the node: the decorators are the identity there

    return {"tag": tag, "rank": int(os.environ["RANK"]), "node": int(os.environ["TORCHYARD_NODE_RANK"]),
            "imported": type(decorated.where).__name__, "host": socket.gethostname()}


@ty.distribute(framework="python", workers=2)  # once per node, as a plain process
@ty.compute(cpus=1)
def reversed_order(x):
    import os

    return (x * 10, os.environ["NODE_RANK"], os.environ["NNODES"])


if __name__ == "__main__":
    import json
    print("''' + RESULTS + '''" + json.dumps({"where": where("hi"), "reversed": reversed_order(4)}), flush=True)
'''


@pytest.fixture(scope="module")
def user_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("researcher") / "my-experiments"
    (root / "data").mkdir(parents=True)
    (root / "data" / "values.txt").write_text("21\n")
    (root / "helpers.py").write_text("def scale(x):\n    return 2 * x\n")
    (root / "train_fn.py").write_text(TRAIN)
    (root / "decorated.py").write_text(textwrap.dedent(DECORATED))
    (root / ".gitignore").write_text("__pycache__/\n")
    return root


def _python(stack, directory: Path, *args: str, stdin: str | None = None, timeout: float = 240):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHYARD_")}
    env.update(TORCHYARD_SERVER=stack.base, TORCHYARD_TOKEN=stack.token)
    return subprocess.run([sys.executable, *args], cwd=str(directory), env=env, capture_output=True, text=True,
                          timeout=timeout, input=stdin)


def _results(completed: subprocess.CompletedProcess) -> dict | list:
    lines = [line for line in completed.stdout.splitlines() if line.startswith(RESULTS)]
    assert lines, f"no results printed (exit {completed.returncode}):\n{completed.stdout[-4000:]}\n{completed.stderr[-4000:]}"
    return json.loads(lines[-1][len(RESULTS):])


def _jobs(stack) -> list[dict]:
    return stack.api("GET", "/api/jobs").json()


def test_a_function_runs_on_two_nodes_and_returns_every_ranks_value_in_rank_order(pg_stack, user_dir):
    completed = _python(pg_stack, user_dir, "train_fn.py", "call")
    assert completed.returncode == 0, completed.stderr[-3000:]
    results = _results(completed)
    assert [r["rank"] for r in results] == [0, 1, 2, 3]
    # The project's own module and data file, and a collective over all four ranks.
    assert all(r["scaled"] == 42 and r["lr"] == 0.1 and r["sum"] == 10.0 for r in results)
    job = _jobs(pg_stack)[0]
    assert job["status"] == "completed" and job["name"] == "fn train"
    # The logs were streamed to the caller as `torchyard run` streams them.
    assert "== job completed" in completed.stdout
    # The API shows each rank's repr, where it ran, and hands out the pickle.
    answer = pg_stack.api("GET", f"/api/jobs/{job['id']}/results").json()
    assert answer["function"] == "train" and answer["world_size"] == 4
    assert [(r["rank"], r["node_rank"]) for r in answer["results"]] == [(0, 0), (1, 0), (2, 1), (3, 1)]
    assert all(r["ok"] and "'scaled': 42" in r["repr"] and r["has_value"] for r in answer["results"])
    pickled = pg_stack.api("GET", f"/api/jobs/{job['id']}/results/2")
    assert pickled.status_code == 200 and pickled.headers["Content-Type"] == "application/octet-stream"
    # The same project calls again: the code bundle is not uploaded twice.
    again = _python(pg_stack, user_dir, "train_fn.py", "call")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "code unchanged" in again.stderr and "function unchanged" in again.stderr


def test_decorators_stack_either_way_and_the_file_imports_on_a_node_without_launching(pg_stack, user_dir):
    before = len(_jobs(pg_stack))
    completed = _python(pg_stack, user_dir, "decorated.py")
    assert completed.returncode == 0, completed.stderr[-3000:]
    results = _results(completed)
    assert [r["rank"] for r in results["where"]] == [0, 1] and [r["node"] for r in results["where"]] == [0, 1]
    assert all(r["imported"] == "function" and r["tag"] == "hi" for r in results["where"])
    assert results["reversed"] == [[40, "0", "2"], [40, "1", "2"]]
    # Two calls, two jobs: importing the module on the nodes launched nothing more.
    assert len(_jobs(pg_stack)) == before + 2


def test_a_rank_that_raises_fails_the_call_with_its_remote_traceback_and_leaves_no_process(pg_stack, user_dir):
    completed = _python(pg_stack, user_dir, "train_fn.py", "raise")
    assert completed.returncode == 0, completed.stderr[-3000:]
    error = _results(completed)
    assert error["rank"] == 3 and error["node_rank"] == 1 and error["machine"]
    assert "raised ValueError: rank 3 refuses lr=0.5" in error["text"]
    assert "remote traceback:" in error["text"] and 'train_fn.py", line' in error["text"]
    job = pg_stack.job(error["job"])
    # Not retried: the function would raise again.
    assert job["status"] == "failed" and "not retried" in job["status_reason"] and job["attempt"] == 0
    assert pg_stack.wait_no_job_processes(job["id"]) == []


def test_submit_returns_at_once_and_stop_ends_the_job(pg_stack, user_dir):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHYARD_")}
    env.update(TORCHYARD_SERVER=pg_stack.base, TORCHYARD_TOKEN=pg_stack.token)
    proc = subprocess.Popen([sys.executable, "train_fn.py", "submit-stop"], cwd=str(user_dir), env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        first = proc.stdout.readline()
        assert first.startswith(RESULTS), first + (proc.stderr.read() if proc.poll() is not None else "")
        job_id = json.loads(first[len(RESULTS):])["job"]
        pg_stack.wait_job(job_id, {"running"})
        proc.stdin.write("go\n")
        proc.stdin.flush()
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stopped = json.loads([line for line in out.splitlines() if line.startswith(RESULTS)][-1][len(RESULTS):])
    assert "stopped" in stopped["stopped"]
    assert pg_stack.job(job_id)["status"] == "stopped"
    assert pg_stack.wait_no_job_processes(job_id) == []


def test_a_result_over_the_limit_fails_its_rank_saying_where_to_write_it(pg_stack, user_dir):
    completed = _python(pg_stack, user_dir, "train_fn.py", "too-big")
    assert completed.returncode == 0, completed.stderr[-3000:]
    error = _results(completed)
    assert error["type"] == "ResultTooLarge"
    assert "over the 1.0 kB limit" in error["text"] and "$TORCHYARD_OUTPUT_DIR" in error["text"]


def test_a_40_mb_argument_of_ones_is_sent_and_unpacked_whatever_it_compresses_to(pg_stack, user_dir):
    """Its payload compresses far past the 200:1 a project's bundle may: a function's payload is
    judged by its size against the limit (it was refused as "an implausible compression ratio")."""
    completed = _python(pg_stack, user_dir, "train_fn.py", "ones")
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert _results(completed) == [[40 << 20, 40 << 20]]


def test_an_unpicklable_function_and_another_python_are_refused_before_anything_is_sent(pg_stack, user_dir):
    jobs_before = len(_jobs(pg_stack))
    completed = _python(pg_stack, user_dir, "train_fn.py", "unpicklable")
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "cannot be pickled" in _results(completed)["text"]
    assert "uploaded" not in completed.stderr and "packed" not in completed.stderr
    assert len(_jobs(pg_stack)) == jobs_before
    # Every machine here runs this Python; a caller on another one is told before any upload ...
    api = ApiClient(pg_stack.base, pg_stack.token)
    check_python(api, f"{sys.version_info[0]}.{sys.version_info[1]}")
    with pytest.raises(FunctionError, match=r"this Python is 3\.99, and no online machine runs Python 3\.99"):
        check_python(api, "3.99")


def test_the_planner_places_a_function_only_where_its_python_and_compute_fit(pg_stack, user_dir):
    from torchyard.bundles import pack_directory

    packed = pack_directory(user_dir, user_dir.parent / "code.tar.zst")
    with open(packed.path, "rb") as body:
        pg_stack.api("PUT", f"/api/bundles/{packed.sha256}", data=body,
                     headers={"Content-Type": "application/octet-stream"})
    payload_dir = user_dir.parent / "payload"
    payload_dir.mkdir(exist_ok=True)
    (payload_dir / "function.pkl").write_bytes(b"not run")
    payload = pack_directory(payload_dir, user_dir.parent / "payload.tar.zst")
    with open(payload.path, "rb") as body:
        pg_stack.api("PUT", f"/api/bundles/{payload.sha256}", data=body,
                     headers={"Content-Type": "application/octet-stream"})
    spec = {"name": "fn plan", "code": {"bundle": packed.sha256},
            "function": {"payload": payload.sha256, "name": "train", "python": "3.99"},
            "resources": {"nodes": 1, "procs_per_node": 1}}
    refused = pg_stack.api("POST", "/api/jobs/plan", json=spec)
    assert refused.status_code == 400, refused.text
    reasons = {s["reason"] for s in refused.json()["skipped"]}
    assert any("the function was pickled on 3.99" in r for r in reasons), reasons
    huge = {**spec, "function": {**spec["function"], "python": f"{sys.version_info[0]}.{sys.version_info[1]}"},
            "resources": {"nodes": 1, "procs_per_node": 1, "memory_per_node": 1 << 49}}
    refused = pg_stack.api("POST", "/api/jobs/plan", json=huge)
    assert refused.status_code == 400 and all("of memory" in s["reason"] for s in refused.json()["skipped"]), refused.text
    fine = pg_stack.api("POST", "/api/jobs/plan", json={**huge, "resources": {"nodes": 2, "procs_per_node": 1}})
    assert fine.status_code == 200, fine.text
    # Entrypoint and function are two ways to run; a spec gives one.
    both = pg_stack.api("POST", "/api/jobs/plan", json={**huge, "entrypoint": "helpers.py"})
    assert both.status_code == 400 and "entrypoint" in both.json()


def test_a_function_job_whose_rank_is_killed_recovers_and_returns_the_next_attempts_values(pg_stack, user_dir):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHYARD_")}
    env.update(TORCHYARD_SERVER=pg_stack.base, TORCHYARD_TOKEN=pg_stack.token)
    proc = subprocess.Popen([sys.executable, "train_fn.py", "recover"], cwd=str(user_dir), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        victims: list = []
        while not victims and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.5)
            jobs = _jobs(pg_stack)  # the newest first; none until the call has submitted it
            job_id = jobs[0]["id"] if jobs and jobs[0]["name"] == "fn flaky" else 0
            victims = [p for p in (pg_stack.job_processes(job_id) if job_id else [])
                       if "torchyard.functions.runner" in " ".join(p.cmdline())
                       and "torch.distributed.run" not in " ".join(p.cmdline())
                       and p.environ().get("TORCHYARD_ATTEMPT") == "0" and p.environ().get("RANK") == "1"]
        assert victims, "no rank 1 of attempt 0 ran"
        victims[0].send_signal(signal.SIGKILL)  # kill -9 of one rank: not the function's own error
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines = [line for line in out.splitlines() if line.startswith(RESULTS)]
    assert lines, out[-3000:] + err[-3000:]
    assert json.loads(lines[-1][len(RESULTS):]) == [[0, 1], [1, 1]]  # both ranks, from attempt 1
    job = pg_stack.job(job_id)
    assert job["status"] == "completed" and job["attempt"] == 1 and job["restarts"] == 1
