"""framework ray on a node: the pure builders of `ray start` (head and worker), the Ray runner's plan,
its temp dir, ports and object store, and the function API's ray spec. No Ray needed."""

from __future__ import annotations

import random
import socket
import sys
from pathlib import Path

import pytest
from launches import make_launch
from torchyard.functions.remote import FunctionError, fn
from torchyard.protocol import NodeLaunch
from torchyard.supervisor import ray_launch
from torchyard.supervisor.ray_logs import RayLogs

PEERS = [{"node_rank": 0, "host": "10.0.0.5", "machine": "a"}, {"node_rank": 1, "host": "10.0.0.6", "machine": "b"}]
PORTS = {"node_manager": 11001, "object_manager": 11002, "dashboard_agent_listen": 11003,
         "dashboard_agent_grpc": 11004, "metrics_export": 11005, "runtime_env_agent": 11006,
         "dashboard": 11007, "min_worker": 12000, "max_worker": 12063}


def launch(**overrides) -> NodeLaunch:
    """The head (node 0 of 2) of job 7's Ray cluster, with two GPUs and four CPUs a node."""
    return make_launch(**{"node_rank": 0, "entrypoint": "driver.py", "launcher": "ray", "peers": PEERS,
                          "env": {"CUDA_VISIBLE_DEVICES": "2,3"}, "config": {"resources": {"cpus_per_node": 4}},
                          **overrides})


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_the_head_runs_its_gcs_on_the_master_port_with_the_plans_resources_and_every_port():
    argv = ray_launch.build_ray_start_argv(launch(), "/env/bin/python", ports=PORTS, temp=Path("/tmp/ray-7-2-0"),
                                          object_store=10**9)
    assert argv[:5] == ["/env/bin/python", "-m", "ray.scripts.scripts", "start", "--block"]
    assert "--head" in argv and "--address" not in argv and "--disable-usage-stats" in argv
    assert flag(argv, "--port") == "29400"
    assert (flag(argv, "--num-cpus"), flag(argv, "--num-gpus")) == ("4", "2")
    assert flag(argv, "--node-ip-address") == "10.0.0.5"
    assert flag(argv, "--dashboard-host") == "10.0.0.5" and "--ray-client-server-port" not in argv
    assert flag(argv, "--dashboard-port") == "11007"
    assert (flag(argv, "--min-worker-port"), flag(argv, "--max-worker-port")) == ("12000", "12063")
    assert flag(argv, "--runtime-env-agent-port") == "11006"
    assert flag(argv, "--temp-dir") == "/tmp/ray-7-2-0"
    assert flag(argv, "--object-store-memory") == str(10**9)


def test_a_worker_joins_the_head_from_its_own_address_without_a_dashboard():
    argv = ray_launch.build_ray_start_argv(launch(node_rank=1, env={}), "py", ports=PORTS, temp=Path("/t"),
                                          object_store=10**8)
    assert flag(argv, "--address") == "10.0.0.5:29400"
    assert flag(argv, "--node-ip-address") == "10.0.0.6"
    assert "--head" not in argv and "--dashboard-port" not in argv
    assert flag(argv, "--num-gpus") == "0"


def test_cpus_default_to_the_processes_per_node():
    assert ray_launch.num_cpus(launch(config={}, nproc_per_node=3)) == 3


def test_the_plan_gives_the_driver_only_to_the_head():
    head = ray_launch.build_plan(launch(), "py", ["py", "driver.py"], ports=PORTS, temp=Path("/t"), object_store=1)
    worker = ray_launch.build_plan(launch(node_rank=1), "py", ["py", "driver.py"], ports=PORTS, temp=Path("/t"),
                                   object_store=1)
    assert head["head"] and head["driver"] == ["py", "driver.py"] and head["nnodes"] == 2
    assert not worker["head"] and worker["driver"] is None and worker["address"] == "10.0.0.5:29400"


def test_the_temp_dir_is_in_the_run_dir_when_short_else_a_short_tmp_folder(tmp_path):
    short = Path("/r/7")
    assert ray_launch.temp_dir(launch(), short) == short / "ray"
    long = tmp_path / ("x" * 80)
    path = ray_launch.temp_dir(launch(node_rank=1), long)
    assert path.parent == Path("/tmp") and path.name.startswith("ray-7-2-1-")
    assert len(str(path)) <= ray_launch.MAX_TEMP_DIR_BYTES


def test_the_object_store_is_a_share_of_free_memory_within_shm_and_at_least_rays_minimum():
    assert ray_launch.object_store_bytes(10 * 2**30) == int(3 * 2**30)
    assert ray_launch.object_store_bytes(10 * 2**30, shm_free=2**30) == int(0.8 * 2**30)
    assert ray_launch.object_store_bytes(2**20) == ray_launch.MIN_OBJECT_STORE


def test_ports_are_free_distinct_and_a_worker_range_skips_a_taken_port():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        ports = ray_launch.pick_ports("127.0.0.1", True, rng=random.Random(1))
    singles = [v for k, v in ports.items() if k not in ("min_worker", "max_worker")]
    assert len(set(singles)) == len(singles) == len(ray_launch.NODE_PORTS + ray_launch.HEAD_PORTS)
    assert ports["max_worker"] - ports["min_worker"] == ray_launch.WORKER_PORT_COUNT - 1
    assert not any(ports["min_worker"] <= p <= ports["max_worker"] for p in singles)
    assert "dashboard" not in ray_launch.pick_ports("127.0.0.1", False)


def test_usage_stats_are_off_for_every_ray_process():
    assert ray_launch.ray_env({"A": "1"}) ["RAY_USAGE_STATS_ENABLED"] == "0"


def test_a_python_without_ray_is_told_apart():
    assert ray_launch.ray_missing(sys.executable) is True  # the test environment has no Ray
    assert "requirements.txt" in ray_launch.MISSING_RAY and "runtime.pip" in ray_launch.MISSING_RAY


def test_the_function_api_submits_a_ray_job_whose_nodes_take_the_worker_node_options():
    def f():
        return 1

    spec = fn(f).distribute(framework="ray", workers=2, worker_node_options={"gpus": 1, "cpus": "4"}).spec(
        code="a" * 64, payload="b" * 64)
    assert spec["framework"] == "ray" and "distributed" not in spec
    # Kubetorch's count: 2 worker nodes beside the head.
    assert spec["resources"] == {"nodes": 3, "procs_per_node": 1, "gpus_per_node": 1, "cpus_per_node": 4}
    with pytest.raises(FunctionError, match="unknown colour"):
        fn(f).distribute(framework="ray", worker_node_options={"colour": 1})
    with pytest.raises(FunctionError, match="one process per node"):
        fn(f).distribute(framework="ray", nproc_per_node=2)


def test_torchyard_run_framework_ray_asks_for_a_ray_job(tmp_path):
    from torchyard.client.specfile import run_spec

    spec = run_spec(target="driver.py", module=False, args=[], directory=tmp_path, nnodes=2, nproc_per_node=1,
                    framework="ray")
    assert spec["framework"] == "ray" and "distributed" not in spec


# --- a Ray node's own logs ---------------------------------------------------------------------------
def _ray_log(temp: Path, name: str, text: str, mode: str = "a") -> None:
    logs = temp / "session_2026-11-25_15-20-01_000000_4242" / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    latest = temp / "session_latest"
    if not latest.exists():
        latest.symlink_to(logs.parent)
    with open(logs / name, mode) as f:
        f.write(text)


def test_ray_logs_pass_the_daemons_warnings_with_their_continuations_and_their_own_output_whole(tmp_path):
    logs = RayLogs(tmp_path)
    assert logs.poll() == []  # no session yet
    _ray_log(tmp_path, "raylet.out",
             "[2026-11-25 15:20:01,123 I 4242 4242] (raylet) main.cc:179: Setting cluster ID\n"
             "[2026-11-25 15:20:02,001 I 4242 4250] (raylet) event_stats: Global stats: 12 total\n"
             "\tRayletWorkerPool.deadline_timer - 1 total\n"
             "[2026-11-25 15:20:03,500 W 4242 4242] (raylet) node_manager.cc:1021: Worker 7 was killed "
             "due to the node running low on memory\n"
             "    memory used 23.1 GB of 24 GB\n"
             "[2026-11-25 15:20:04,000 I 4242 4242] (raylet) node_manager.cc:99: all good\n")
    _ray_log(tmp_path, "gcs_server.err", "*** SIGSEGV received at time=1764084000 ***\n\n")
    assert logs.poll() == [
        "[2026-11-25 15:20:03,500 W 4242 4242] (raylet) node_manager.cc:1021: Worker 7 was killed due to "
        "the node running low on memory",
        "    memory used 23.1 GB of 24 GB",
        "gcs_server.err: *** SIGSEGV received at time=1764084000 ***",
    ]
    _ray_log(tmp_path, "gcs_server.out",
             "[2026-11-25 15:20:05,000 E 4100 4100] (gcs_server) gcs_health_check_manager.cc:80: Node abc "
             "failed health check")
    assert logs.poll() == []  # not a whole line yet
    assert logs.poll(final=True) == [
        "[2026-11-25 15:20:05,000 E 4100 4100] (gcs_server) gcs_health_check_manager.cc:80: Node abc failed "
        "health check"]
    logs.close()
