"""GPU use in a node's resource events (DistroML's resource events carry CPU/GPU utilization): each of
the node's GPUs as NVML reads it, and no GPU field at all where NVML reads none, as on this machine."""

from __future__ import annotations

import signal
import sys
import types
from collections.abc import Iterator

import pytest
from supervisor_support import free_port
from torchyard import protocol
from torchyard.supervisor.gpu_use import GpuUse, node_gpus


def test_the_nodes_gpus_are_those_the_plan_made_visible():
    assert node_gpus({"CUDA_VISIBLE_DEVICES": "2,3"}) == [2, 3]
    assert node_gpus({"CUDA_VISIBLE_DEVICES": ""}) == node_gpus({}) == []


def test_without_nvml_there_is_nothing_to_report(monkeypatch):
    assert GpuUse([]).sample() is None  # a CPU node: NVML is not even asked
    monkeypatch.setitem(sys.modules, "pynvml", None)  # the package not installed
    assert GpuUse([0]).sample() is None


def test_where_nvml_has_no_driver_there_is_nothing_to_report():
    pytest.importorskip("pynvml")
    gpu_use = GpuUse([0, 1])
    assert gpu_use.sample() is None and gpu_use.sample() is None  # NVML is not tried again


class FakeNvml(types.ModuleType):
    """NVML as the GPUs this machine lacks would answer (pynvml's calls and fields); GPU 3 has fallen
    off the bus."""

    class NVMLError(Exception):
        pass

    def __init__(self) -> None:
        super().__init__("pynvml")
        self.started = 0

    def nvmlInit(self) -> None:
        self.started += 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if index == 3:
            raise self.NVMLError("GPU is lost")
        return index

    def nvmlDeviceGetUtilizationRates(self, handle: int):
        return types.SimpleNamespace(gpu=40 + handle, memory=0)

    def nvmlDeviceGetMemoryInfo(self, handle: int):
        return types.SimpleNamespace(used=(1024 + handle) * 2**20, total=81_559 * 2**20, free=0)


@pytest.fixture
def nvml(monkeypatch) -> Iterator[FakeNvml]:
    fake = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    yield fake


def test_each_gpu_of_the_node_is_reported_as_nvml_reads_it(nvml):
    gpu_use = GpuUse([2, 3])
    expected = [{"index": 2, "utilization_percent": 42.0, "memory_used_mb": 1026.0, "memory_total_mb": 81559.0}]
    assert gpu_use.sample() == expected and gpu_use.sample() == expected
    assert nvml.started == 1
    assert GpuUse([3]).sample() is None  # only a GPU NVML cannot read: nothing rather than a zero


def test_a_node_on_a_machine_without_nvml_sends_resource_events_without_gpus(supervisors, job_launch):
    node = job_launch(entrypoint="scripts/sleeper.py", nproc_per_node=2, master_port=free_port(),
                       env={"CUDA_VISIBLE_DEVICES": "0,1"})  # two GPUs planned, none NVML sees
    proc, _ = supervisors.start(node)
    try:
        events = supervisors.wait_for(node.job_id, lambda events: any(
            e["type"] == protocol.RESOURCE and e["processes"] == 3 for e in events), timeout=60)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    resource = [e for e in events if e["type"] == protocol.RESOURCE]
    assert all(set(e) >= {"cpu_percent", "rss_mb", "processes"} and "gpus" not in e for e in resource)
