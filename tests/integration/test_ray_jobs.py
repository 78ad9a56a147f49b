"""Ray clusters on the team's own machines (framework ray), on two hosts that are really apart
(network namespaces, netns.py): a head on node 0, a worker on node 1, the driver on the head.

Ray comes only from the test project's own requirements.txt: each host's agent installs it into its
cached environment the first time (about 80 MB from the package index), and every case of this
module reuses that environment (same requirements, same hash)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from .netns import Cluster, netns_unavailable, separate_hosts
from .stack import ROOT
from .test_bring_your_own_code import upload

pytestmark = pytest.mark.skipif(bool(netns_unavailable()), reason=netns_unavailable() or "available")

FINAL = {"completed", "failed", "stopped"}
# ray[default]: the dashboard's packages too (minimal ray has none).
RAY = "ray[default]==2.60.0"
# The first job of the module installs Ray on both hosts.
PREPARE_S = 900
COMPLETE = ".downloaded"  # written once every wheel is there
RAY_PROCESS_NAMES = ("gcs_server", "raylet", "ray::", "dashboard", "DashboardAgent", "RuntimeEnvAgent",
                     "log_monitor", "monitor.py", "ray.scripts.scripts", "torchyard.ray_node")

DRIVER = """\
import socket
import sys
import time

import ray

ray.init()  # RAY_ADDRESS, set by Torchyard


@ray.remote(num_cpus=1, scheduling_strategy="SPREAD")
def where(i):
    time.sleep(0.3)
    return i, ray.util.get_node_ip_address()


done = ray.get([where.remote(i) for i in range(20)])
print(f"tasks {len(done)} on {','.join(sorted({ip for _, ip in done}))} of {len(ray.nodes())} nodes", flush=True)
if "--hold" in sys.argv:
    print("holding", flush=True)
    time.sleep(600)
"""

# The seed's example; `import ray` moved into the function, as this caller has no Ray (the nodes do).
SEED = '''\
import json

import torchyard as ty


def run_ray_job():
    import ray

    ray.init(address="auto")

    @ray.remote(num_gpus=0)
    def gpu_task(i):
        return f"Task {i} on GPU"

    refs = [gpu_task.remote(i) for i in range(10)]
    return ray.get(refs)


if __name__ == "__main__":
    remote = ty.fn(run_ray_job).to(ty.Compute(cpus=1)).distribute(framework="ray", workers=1)  # + the head
    print("RESULTS " + json.dumps(remote()), flush=True)
'''


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    # The namespaced hosts reach nothing but the bridge: their pip installs the job's requirements
    # from a folder of wheels fetched here first, kept under var/ by version: once per checkout.
    wheels = ROOT / "var" / "wheels" / RAY.replace("[default]==", "-")
    if not (wheels / COMPLETE).exists():
        started = time.monotonic()
        shutil.rmtree(wheels, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--dest", str(wheels), RAY], check=True,
                       timeout=PREPARE_S)
        (wheels / COMPLETE).touch()
        print(f"downloaded {RAY} and its dependencies in {time.monotonic() - started:.1f} s", file=sys.stderr)
    patch = pytest.MonkeyPatch()
    patch.setenv("PIP_FIND_LINKS", str(wheels))
    patch.setenv("PIP_NO_INDEX", "1")
    # Nothing byte-compiled at install: Ray is 80 MB of Python, and a test imports a small part of it.
    patch.setenv("PIP_NO_COMPILE", "1")
    before = set(Path("/tmp").glob("ray-*"))
    try:
        with separate_hosts(tmp_path_factory.mktemp("ray")) as made:
            yield made
    finally:
        patch.undo()
        # Ray temp dirs of nodes whose supervisor was killed with the hosts (a failed case).
        for left in set(Path("/tmp").glob("ray-*")) - before:
            shutil.rmtree(left, ignore_errors=True)


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("researcher") / "ray-project"
    root.mkdir()
    (root / "requirements.txt").write_text(RAY + "\n")
    (root / "driver.py").write_text(DRIVER)
    (root / "seed_ray.py").write_text(SEED)
    (root / "fails.py").write_text("import ray\n\nray.init()\nraise ValueError('the driver gives up')\n")
    return root


@pytest.fixture(scope="module")
def bundle(cluster: Cluster, project: Path, tmp_path_factory) -> str:
    sha256, _ = upload(cluster.stack, project, tmp_path_factory.mktemp("packed"))
    return sha256


def ray_spec(bundle: str, *args: str, **extra) -> dict:
    return {"name": "ray", "code": {"bundle": bundle}, "entrypoint": "driver.py", "args": list(args),
            "framework": "ray", "resources": {"nodes": 2, "procs_per_node": 1},
            "fault_tolerance": {"max_restarts": 0}, **extra}


def lines_of(cluster: Cluster, job_id: int) -> list[str]:
    return [e["line"] for e in cluster.stack.logs(job_id)]


def wait_line(cluster: Cluster, job_id: int, prefix: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [line for line in lines_of(cluster, job_id) if line.startswith(prefix)]
        if found:
            return found[0]
        job = cluster.stack.job(job_id)
        assert job["status"] not in FINAL, f"{job['status_reason']}\n" + "\n".join(lines_of(cluster, job_id)[-40:])
        time.sleep(1.0)
    raise AssertionError(f"no {prefix!r} line:\n" + "\n".join(lines_of(cluster, job_id)[-40:]))


def ray_processes(cluster: Cluster) -> list[str]:
    left = []
    for host in cluster.hosts:
        for proc in host.processes():
            try:
                text = " ".join(proc.cmdline()) or proc.name()
            except Exception:
                continue
            if any(name in text for name in RAY_PROCESS_NAMES):
                left.append(f"{host.machine_name}: {proc.pid} {text[:120]}")
    return left


def outsider_token(cluster: Cluster) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL",)}
    env["DATABASE_URL"] = f"postgresql://postgres@127.0.0.1:5432/{cluster.database}"
    code = ("from django.contrib.auth import get_user_model; "
            "get_user_model().objects.create_user('outsider', password='outsider-pass-123')")
    subprocess.run([sys.executable, "manage.py", "shell", "-c", code], cwd=str(ROOT / "backend"), env=env,
                   check=True, capture_output=True, timeout=120)
    answer = requests.post(cluster.stack.base + "/api/auth/token",
                           json={"username": "outsider", "password": "outsider-pass-123"}, timeout=10)
    assert answer.status_code in (200, 201), answer.text
    return answer.json()["token"]


def test_a_ray_job_spans_both_hosts_shows_its_dashboard_to_members_only_and_stops_leaving_nothing(cluster, bundle):
    started = time.monotonic()
    # A project of its own: every user joins the default one.
    assert cluster.stack.api("POST", "/api/projects", json={"name": "ray-team"}).status_code == 201
    job = cluster.stack.submit(ray_spec(bundle, "--hold", project="ray-team"))
    job_id = job["id"]
    said = wait_line(cluster, job_id, "tasks ", PREPARE_S)
    addresses = sorted(h.address for h in cluster.hosts)
    assert said == f"tasks 20 on {','.join(addresses)} of 2 nodes", said
    wait_line(cluster, job_id, "holding", 60)
    print(f"ray job up and 20 tasks done {time.monotonic() - started:.1f} s after submit", file=sys.stderr)

    member = cluster.stack.api("GET", f"/api/jobs/{job_id}/ray/api/version")
    assert member.status_code == 200, member.text
    assert "ray_version" in member.json(), member.text
    outsider = requests.get(cluster.stack.base + f"/api/jobs/{job_id}/ray/api/version",
                            headers={"Authorization": f"Token {outsider_token(cluster)}"}, timeout=10)
    assert outsider.status_code == 404, outsider.text

    running = [e for e in cluster.stack.events(job_id, "state") if (e.get("payload") or e).get("ray")]
    assert len(running) == 2, "every node's running event carries its Ray ports"
    temp_dirs = [Path((e.get("payload") or e)["ray"]["temp_dir"]) for e in running]

    assert cluster.stack.api("POST", f"/api/jobs/{job_id}/stop").status_code == 202
    done = cluster.stack.wait_job(job_id, FINAL, timeout=60)
    assert done["status"] == "stopped", done["status_reason"]
    left = cluster.stack.wait_no_job_processes(job_id, timeout=20)
    assert not left, [" ".join(p.cmdline())[:120] for p in left]
    deadline = time.monotonic() + 20
    while (ray_left := ray_processes(cluster)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not ray_left, ray_left
    assert not [d for d in temp_dirs if d.exists()], temp_dirs
    assert cluster.stack.api("GET", f"/api/jobs/{job_id}/ray/api/version").status_code == 404


def kill_worker_raylet(cluster: Cluster, job_id: int) -> str:
    """SIGKILL the Ray worker node's raylet (node 1's host): the host lives, its Ray node dies."""
    worker = next(n for n in cluster.stack.job(job_id)["nodes"] if n["node_rank"] == 1 and n["status"] == "running")
    host = cluster.host_of(worker["machine"]["id"])
    raylets = [p for p in host.processes() if p.name() == "raylet"]
    assert len(raylets) == 1, raylets
    raylets[0].kill()
    return host.address


def test_a_lost_ray_worker_node_relaunches_the_cluster_and_the_driver(cluster, bundle):
    spec = ray_spec(bundle, "--hold", fault_tolerance={"max_restarts": 1})
    job_id = cluster.stack.submit(spec)["id"]
    wait_line(cluster, job_id, "holding", PREPARE_S)
    kill_worker_raylet(cluster, job_id)
    # A node failure like any other: the whole cluster and the driver again, in attempt 1.
    addresses = ",".join(sorted(h.address for h in cluster.hosts))
    deadline = time.monotonic() + 180
    while not [e for e in cluster.stack.logs(job_id)
               if e.get("attempt") == 1 and e["line"] == f"tasks 20 on {addresses} of 2 nodes"]:
        assert time.monotonic() < deadline, cluster.stack.job_log_tail(job_id)
        assert cluster.stack.job(job_id)["status"] not in FINAL, cluster.stack.job_log_tail(job_id)
        time.sleep(1.0)
    assert cluster.stack.job(job_id)["restarts"] == 1
    assert cluster.stack.api("POST", f"/api/jobs/{job_id}/stop").status_code == 202
    assert cluster.stack.wait_job(job_id, FINAL, timeout=60)["status"] == "stopped"


def test_a_driver_that_tolerates_worker_loss_goes_on_and_the_heads_ray_logs_say_the_node_died(cluster, bundle):
    spec = ray_spec(bundle, "--hold", fault_tolerance={"max_restarts": 0, "ray_worker_loss": "tolerate"})
    job_id = cluster.stack.submit(spec)["id"]
    wait_line(cluster, job_id, "holding", PREPARE_S)
    kill_worker_raylet(cluster, job_id)
    # The head's GCS declares the node dead after its health checks (about 15 s); Ray's own warnings
    # reach the job's log, labelled as Ray's, while the job runs on.
    deadline = time.monotonic() + 60
    while not [e for e in cluster.stack.logs(job_id)
               if e.get("source") == "ray" and "Node is dead because the health check failed" in e["line"]]:
        assert time.monotonic() < deadline, "\n".join(lines_of(cluster, job_id)[-40:])
        time.sleep(1.0)
    job = cluster.stack.job(job_id)
    assert job["status"] == "running" and job["attempt"] == 0, job["status_reason"]
    assert {n["node_rank"]: n["status"] for n in job["nodes"]} == {0: "running", 1: "failed"}
    assert cluster.stack.api("POST", f"/api/jobs/{job_id}/stop").status_code == 202
    assert cluster.stack.wait_job(job_id, FINAL, timeout=60)["status"] == "stopped"


def test_a_driver_that_exits_0_completes_the_job_and_ends_the_workers(cluster, bundle):
    done = cluster.stack.wait_job(cluster.stack.submit(ray_spec(bundle))["id"], FINAL, timeout=PREPARE_S)
    assert done["status"] == "completed", done["status_reason"]
    assert done["status_reason"] == "the Ray driver exited 0"


def test_a_driver_that_exits_non_zero_fails_the_job_with_its_stderr_tail(cluster, bundle):
    spec = {**ray_spec(bundle), "entrypoint": "fails.py"}
    done = cluster.stack.wait_job(cluster.stack.submit(spec)["id"], FINAL, timeout=PREPARE_S)
    assert done["status"] == "failed"
    assert "Ray exited with code 1" in done["status_reason"], done["status_reason"]
    assert "ValueError: the driver gives up" in done["status_reason"], done["status_reason"]


def test_the_seeds_run_ray_job_through_the_function_api_returns_its_list(cluster, project):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHYARD_")}
    env.update(TORCHYARD_SERVER=cluster.stack.base, TORCHYARD_TOKEN=cluster.stack.token)
    ran = subprocess.run([sys.executable, "seed_ray.py"], cwd=str(project), env=env, capture_output=True, text=True,
                         timeout=PREPARE_S)
    results = [line for line in ran.stdout.splitlines() if line.startswith("RESULTS ")]
    assert results, ran.stdout[-3000:] + ran.stderr[-3000:]
    import json

    # A Ray job's function runs once, as the driver: the call returns its value itself.
    assert json.loads(results[0][len("RESULTS "):]) == [f"Task {i} on GPU" for i in range(10)]


def test_a_ray_job_without_ray_in_its_environment_fails_before_launch_saying_so(cluster, tmp_path):
    (tmp_path / "project").mkdir()
    (tmp_path / "project" / "driver.py").write_text("import ray\n")
    sha256, _ = upload(cluster.stack, tmp_path / "project", tmp_path)
    done = cluster.stack.wait_job(cluster.stack.submit(ray_spec(sha256))["id"], FINAL, timeout=120)
    assert done["status"] == "failed"
    assert "add `ray` to the project's requirements.txt or to runtime.pip" in done["status_reason"], \
        done["status_reason"]
    assert "Ray not started" in done["status_reason"]
