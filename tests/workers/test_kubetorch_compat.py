"""Kubetorch's distributed-training examples with only their import changed (`import kubetorch as
kt` -> `import torchyard as ty`), each run up to the JobSpec it would submit; and the parts they lean
on: CPU quantities, `ty.images`, `Compute(...).distribute(...)`, Ray's worker count, volume sizes
and storage classes, and `pod_ips` against a real peers.json."""

from __future__ import annotations

import subprocess
import sys
import threading
import types
from pathlib import Path

import peer_files
import pytest
import torchyard as ty
from torchyard import protocol
from torchyard.agent import runs
from torchyard.functions.remote import FunctionError, RemoteFunction
from torchyard.sdk.peers import PeersTimeout

CODE, PAYLOAD = "c" * 64, "p" * 64
PYTHON = f"{sys.version_info[0]}.{sys.version_info[1]}"
OTHER_PYTHON = f"{sys.version_info[0]}{sys.version_info[1] - 1}"  # "310" beside 3.11: not the caller's


def run_example(source: str) -> dict:
    """Run an example's code as a user's script would, and return its names."""
    namespace: dict = {"__name__": "kubetorch_example"}
    exec(compile(source, "<kubetorch example>", "exec"), namespace)
    return namespace


def submitted(remote: RemoteFunction) -> dict:
    return remote.spec(code=CODE, payload=PAYLOAD)


# --- the document's examples, `kt` -> `ty` ------------------------------------------------------------
DDP = '''
import torchyard as ty

def train_fn():
    import torch
    import os

    # Kubetorch sets up these env vars for you
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])

    # Initialize process group
    torch.distributed.init_process_group(backend="nccl")

    # Verify
    return f"Rank {rank}/{world_size} initialized on {os.uname().nodename}"

# Define compute for ONE worker
compute = ty.Compute(
    gpus=8,                # 8 GPUs per node
    memory="512Gi",
    image=ty.images.pytorch("24.08-py3")
)

# Enable distribution
# workers=4 means 4 nodes (total 32 GPUs)
remote_train = ty.fn(train_fn).to(compute).distribute(
    framework="pytorch",
    workers=4,
)
'''

RAY = '''
import torchyard as ty
import ray

def run_ray_job():
    # Connect to the local Ray cluster
    ray.init(address="auto")

    @ray.remote(num_gpus=1)
    def gpu_task(i):
        return f"Task {i} on GPU"

    refs = [gpu_task.remote(i) for i in range(100)]
    return ray.get(refs)

# Define head node resources
compute = ty.Compute(
    cpus="4",
    memory="16Gi",
    image=ty.images.Ray("2.32.0-py311")
)

# Distribute as Ray cluster
remote_ray = ty.fn(run_ray_job).to(compute).distribute(
    framework="ray",
    workers=4,  # 4 worker nodes (plus 1 head node)
    worker_node_options={
        "gpus": 1,
        "cpus": "4",
        "memory": "16Gi"
    }
)
'''

DECORATORS = '''
import torchyard as ty

@ty.compute(gpus=8)
@ty.distribute(framework="pytorch", workers=2)
def train():
    ...
'''

VOLUME = '''
import torchyard as ty

vol = ty.Volume(
    name="shared-data",
    size="1Ti",
    mount_path="/data",
    access_mode="ReadWriteMany",  # Critical for multi-node
    storage_class="juicefs-sc"    # Or NFS/CephFS
)

compute = ty.Compute(
    gpus=8,
    volumes=[vol]
).distribute(framework="pytorch", workers=4)
'''

POD_IPS = '''
from torchyard.distributed import pod_ips

# Get all pod IPs for current service
ips = pod_ips()

# Wait for quorum
quorum_ips = pod_ips(quorum_workers=4, quorum_timeout=60)
'''


def test_the_ddp_example_asks_for_4_nodes_of_8_gpus_on_the_machines_own_torch():
    spec = submitted(run_example(DDP)["remote_train"])
    assert spec["resources"] == {"nodes": 4, "procs_per_node": 8, "gpus_per_node": 8, "memory_per_node": 512 << 30}
    assert spec["distributed"] == {"launcher": "torchrun"}
    assert "runtime" not in spec and "env" not in spec  # the NGC tag installs nothing: the machines' torch


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the example's image names Python 3.11")
def test_the_ray_example_is_a_head_and_4_workers_each_with_a_gpu_and_ray_from_pip(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", types.ModuleType("ray"))  # the caller's Ray, which this test has not
    remote = run_example(RAY)["remote_ray"]
    spec = submitted(remote)
    assert spec["framework"] == "ray" and "distributed" not in spec
    assert spec["resources"] == {"nodes": 5, "procs_per_node": 1, "gpus_per_node": 1, "cpus_per_node": 4,
                                 "memory_per_node": 16 << 30}
    assert spec["runtime"] == {"pip": ["ray[default]==2.32.0"]}


def test_the_decorators_example_is_2_nodes_of_8_gpus():
    remote = run_example(DECORATORS)["train"]
    assert isinstance(remote, RemoteFunction)
    spec = submitted(remote)
    assert spec["resources"] == {"nodes": 2, "procs_per_node": 8, "gpus_per_node": 8}
    assert spec["distributed"] == {"launcher": "torchrun"}


def test_the_volume_example_asks_for_the_size_and_class_on_4_nodes():
    compute = run_example(VOLUME)["compute"]
    spec = submitted(ty.fn(lambda: None).to(compute))
    assert spec["resources"] == {"nodes": 4, "procs_per_node": 8, "gpus_per_node": 8}
    assert spec["volumes"] == [{"name": "shared-data", "mount_path": "/data", "access_mode": "ReadWriteMany",
                                "size": 1 << 40, "storage_class": "juicefs-sc"}]


def test_the_pod_ips_example_answers_from_the_nodes_peers_file(node_env):
    runs.write_peers(node_env, 7, 0, 1, membership(2, "running", "running", "running", "running"))
    names = run_example(POD_IPS)
    assert names["ips"] == names["quorum_ips"] == ["10.0.0.5", "10.0.0.6", "10.0.0.7", "10.0.0.8"]


# --- CPU quantities -------------------------------------------------------------------------------------
@pytest.mark.parametrize(("cpus", "cores"), [("4", 4), (4, 4), (4.0, 4), ("4000m", 4), (" 2 ", 2), ("3.0", 3),
                                             (None, None)])
def test_cpus_read_as_kubernetes_writes_them(cpus, cores):
    assert ty.Compute(cpus=cpus).cpus == cores


@pytest.mark.parametrize("cpus", ["500m", 0.5, "1.5", "0.5", "1500m"])
def test_a_share_of_a_core_is_refused_asking_for_whole_cores(cpus):
    with pytest.raises(ValueError, match=r"Torchyard places whole cores .*ask for whole cores"):
        ty.Compute(cpus=cpus)


@pytest.mark.parametrize("cpus", [0, "0", -1, True, "four", "4 cores", float("inf")])
def test_a_cpu_count_that_is_not_one_is_refused(cpus):
    with pytest.raises(ValueError, match=r"Compute\(cpus="):
        ty.Compute(cpus=cpus)


def test_worker_node_options_cpus_are_read_the_same_way_and_refused_where_written():
    spec = submitted(ty.fn(print).distribute(framework="ray", workers=1, worker_node_options={"cpus": "2000m"}))
    assert spec["resources"]["cpus_per_node"] == 2
    with pytest.raises(ValueError, match="whole cores"):
        ty.fn(print).distribute(framework="ray", worker_node_options={"cpus": "500m"})
    with pytest.raises(ValueError, match="not a size"):
        ty.distribute(framework="ray", worker_node_options={"memory": "lots"})


# --- images -----------------------------------------------------------------------------------------------
def test_images_are_lazy_and_the_agent_side_never_loads_the_function_api():
    code = ("import sys, torchyard, torchyard.agent.capabilities, torchyard.agent.volumes; "
            "assert not any(m.startswith(('torchyard.functions', 'torchyard.distributed')) for m in sys.modules); "
            "images = torchyard.images; assert images.pytorch().name == 'pytorch'; "
            "assert 'torchyard.functions.images' in sys.modules; "
            "import torchyard.distributed; assert 'torch' not in sys.modules, 'torch was imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_pytorch_records_its_tag_and_installs_nothing():
    image = ty.images.pytorch("24.08-py3")
    assert (image.name, image.tag, image.pip, image.env) == ("pytorch", "24.08-py3", (), ())
    assert ty.images.pytorch().tag is None


def test_ray_pins_ray_from_pip_and_checks_the_python_its_tag_names():
    assert ty.images.Ray(f"2.32.0-py{PYTHON.replace('.', '')}").pip == ("ray[default]==2.32.0",)
    assert ty.images.ray(f"2.9.3-py{PYTHON.replace('.', '')}-gpu").pip == ("ray[default]==2.9.3",)
    assert ty.images.ray().pip == ty.images.ray("latest").pip == ("ray[default]",)
    with pytest.raises(ValueError, match=rf"names Python {OTHER_PYTHON[0]}\.{OTHER_PYTHON[1:]}, and this Python is "
                                         rf"{PYTHON}.*Call it from Python"):
        ty.images.Ray(f"2.32.0-py{OTHER_PYTHON}")
    with pytest.raises(ValueError, match="a Ray version"):
        ty.images.ray("two")


def test_python_images_are_the_machines_python_of_the_callers_version():
    assert ty.images.python(PYTHON).python == PYTHON
    assert ty.images.debian().pip == ty.images.Debian().pip == ()
    with pytest.raises(ValueError, match="names Python"):
        ty.images.python(f"{OTHER_PYTHON[0]}.{OTHER_PYTHON[1:]}")


def test_an_image_is_chained_into_new_images_and_merged_into_the_job():
    base = ty.images.Ray("latest")
    image = base.pip_install(["einops==0.8", "ray[default]"]).env_vars({"OMP_NUM_THREADS": 1, "A": "image"})
    assert base.pip == ("ray[default]",) and base.env == ()  # a new Image each time
    assert image.set_env_vars({"A": "again"}).env == (("OMP_NUM_THREADS", "1"), ("A", "again"))
    compute = ty.Compute(image=image, requirements=["einops==0.8", "rich"], env={"A": "compute"})
    spec = submitted(ty.fn(print).to(compute))
    assert spec["runtime"] == {"pip": ["ray[default]", "einops==0.8", "rich"]}
    assert spec["env"] == {"OMP_NUM_THREADS": "1", "A": "compute"}  # the compute's own wins


def test_pip_options_and_bad_names_are_refused_where_written():
    with pytest.raises(ValueError, match="pip options are not taken here"):
        ty.images.debian().pip_install("--pre torch==2.0.0rc1")
    with pytest.raises(ValueError, match="not an environment variable name"):
        ty.images.debian().env_vars({"1BAD": "x"})


@pytest.mark.parametrize("make", [
    lambda: ty.Compute(image="nvcr.io/nvidia/pytorch:24.08-py3"),
    lambda: ty.Image(image_id="docker.io/rayproject/ray:2.32.0"),
    lambda: ty.Image(name="mine").from_docker("docker.io/library/python:3.11"),
])
def test_a_container_image_is_refused_saying_how_to_describe_the_environment(make):
    with pytest.raises(ValueError, match=r"names a container image, and Torchyard runs no containers: a function runs "
                                         r"on each machine's own Python .*torchyard.images.pytorch\(\)"):
        make()


def test_setup_commands_and_another_python_are_refused():
    with pytest.raises(ValueError, match="runs no setup commands"):
        ty.images.debian().run_bash("apt-get install -y vim")
    with pytest.raises(ValueError, match="--python"):
        ty.Image(python_path="/opt/conda/bin/python")
    with pytest.raises(ValueError, match="not a torchyard.images value"):
        ty.Compute(image=42)


# --- Compute.distribute -------------------------------------------------------------------------------------
def test_compute_distribute_carries_a_distribution_that_to_takes():
    plain = ty.Compute(gpus=2)
    spread = plain.distribute(framework="pytorch", workers=3, nproc_per_node=1)
    assert plain.distribution is None and spread.distribution is not None and spread.gpus == 2
    spec = submitted(ty.fn(print).to(spread))
    assert (spec["resources"]["nodes"], spec["resources"]["procs_per_node"]) == (3, 1)


def test_a_distribute_on_the_function_after_to_wins_and_a_plain_compute_keeps_the_functions():
    spread = ty.Compute(gpus=2).distribute(workers=3)
    assert submitted(ty.fn(print).to(spread).distribute(workers=5))["resources"]["nodes"] == 5
    assert submitted(ty.fn(print).distribute(workers=5).to(spread))["resources"]["nodes"] == 3
    assert submitted(ty.fn(print).distribute(workers=5).to(ty.Compute(gpus=2)))["resources"]["nodes"] == 5


def test_compute_distribute_fails_where_it_is_written():
    with pytest.raises(FunctionError, match="framework 'jax'"):
        ty.Compute().distribute(framework="jax")


# --- Ray counts its workers as Kubetorch does -----------------------------------------------------------------
@pytest.mark.parametrize(("workers", "nodes"), [(0, 1), (1, 2), (4, 5)])
def test_ray_workers_are_worker_nodes_beside_the_head(workers, nodes):
    assert submitted(ty.fn(print).distribute(framework="ray", workers=workers))["resources"]["nodes"] == nodes


def test_ray_refuses_a_range_and_a_negative_count_and_pytorch_still_needs_a_node():
    with pytest.raises(FunctionError, match="a Ray job has a fixed number of worker nodes, not a range"):
        ty.fn(print).distribute(framework="ray", workers=(1, 3))
    with pytest.raises(FunctionError, match="Ray worker nodes beside the head, 0 or more"):
        ty.fn(print).distribute(framework="ray", workers=-1)
    with pytest.raises(FunctionError, match="the number of nodes, 1 or more"):
        ty.fn(print).distribute(framework="pytorch", workers=0)


# --- volumes --------------------------------------------------------------------------------------------------
def test_a_volume_takes_kubetorchs_arguments_and_torchyards_older_order():
    assert ty.Volume("data", "5Gi", "juicefs-sc").to_spec() == {
        "name": "data", "access_mode": "ReadWriteMany", "size": 5 << 30, "storage_class": "juicefs-sc"}
    assert ty.Volume("data", "/data").to_spec() == {"name": "data", "access_mode": "ReadWriteMany",
                                                   "mount_path": "/data"}
    assert ty.Volume("data", size=4096).size == 4096
    with pytest.raises(ValueError, match="not a size"):
        ty.Volume("data", "10 Gigs")
    with pytest.raises(ValueError, match="storage_class 'Juice FS'"):
        ty.Volume("data", storage_class="Juice FS")


# --- pod_ips --------------------------------------------------------------------------------------------------
PEERS = [{"node_rank": rank, "host": f"10.0.0.{5 + rank}", "machine": f"gpu-{rank}"} for rank in range(4)]


def membership(version: int, *statuses: str) -> dict:
    return peer_files.membership(PEERS, version, *statuses)


@pytest.fixture
def node_env(tmp_path, monkeypatch) -> Path:
    """Node 1 of job 7's four nodes, as its supervisor sets it up."""
    return peer_files.as_node(tmp_path, monkeypatch, PEERS, attempt=0)


def test_pod_ips_waits_for_the_quorum_of_workers(node_env):
    from torchyard.distributed import pod_ips

    runs.write_peers(node_env, 7, 0, 1, membership(1, "running", "running", "preparing", "launching"))
    assert pod_ips(quorum_workers=2, quorum_timeout=1) == ["10.0.0.5", "10.0.0.6"]
    writer = threading.Timer(0.3, runs.write_peers,
                             (node_env, 7, 0, 1, membership(2, "running", "running", "running", "preparing")))
    writer.start()
    try:
        assert pod_ips(quorum_workers=3, quorum_timeout=10) == ["10.0.0.5", "10.0.0.6", "10.0.0.7"]
    finally:
        writer.cancel()


def test_pod_ips_times_out_with_the_sdks_peers_timeout_naming_the_missing(node_env):
    from torchyard.distributed import pod_ips

    runs.write_peers(node_env, 7, 0, 1, membership(1, "running", "running", "failed", "launching"))
    with pytest.raises(TimeoutError, match=r"2 of 4 node\(s\) up after 0.1 s, 4 wanted; missing: node 2 \(gpu-2, "
                                           r"failed\), node 3 \(gpu-3, launching\)") as raised:
        pod_ips(quorum_timeout=0.1)
    assert isinstance(raised.value, PeersTimeout)
    assert ty.sdk.pod_ips is pod_ips and ty.sdk.PeersTimeout is PeersTimeout


def test_off_torchyard_pod_ips_is_this_machine(monkeypatch):
    from torchyard.distributed import pod_ips

    monkeypatch.delenv(protocol.ENV_RUN_DIR, raising=False)
    monkeypatch.setenv("MASTER_ADDR", "10.1.1.1")
    assert pod_ips() == pod_ips(quorum_workers=4, quorum_timeout=60) == ["10.1.1.1"]
