"""supervisor/volumes.py: what a node makes of its job's volumes, and the preflight's proof that a
ReadWriteMany volume is one filesystem, without a cluster."""

from __future__ import annotations

import json
import os
import socket
import threading
from pathlib import Path

import pytest
from torchyard.agent import volumes as agent_volumes
from torchyard.agent.capabilities import capabilities
from torchyard.bundles.cache import PrepareError
from torchyard.client.specfile import volume_request
from torchyard.supervisor import volumes
from torchyard.supervisor.preflight import MasterListener, PreflightError, Versions, reach_master
from torchyard.supervisor.volumes import VolumeError


def volume(path: Path | str, name: str = "shared-data", mount_path: str = "data",
           access_mode: str = "ReadWriteMany", machine: str = "box-a") -> dict:
    return {"name": name, "path": str(path), "mount_path": mount_path, "access_mode": access_mode, "machine": machine}


def test_an_agent_declaration_is_name_equals_absolute_path():
    assert agent_volumes.parse_declaration("shared-data=/mnt/nfs/shared/") == ("shared-data", "/mnt/nfs/shared")
    for bad in ("shared-data", "Shared=/x", "x=relative", "=/x", "-x=/x"):
        with pytest.raises(ValueError):
            agent_volumes.parse_declaration(bad)


def test_the_agent_declares_a_volumes_storage_class_and_reports_it(tmp_path):
    name, path = agent_volumes.parse_declaration(f"shared-data={tmp_path}/,class=juicefs-sc")
    assert (name, path, path.storage_class) == ("shared-data", str(tmp_path), "juicefs-sc")
    plain = agent_volumes.parse_declaration(f"scratch={tmp_path}")[1]
    # As the agent's heartbeat carries them: its declarations, name -> path, through its capabilities.
    found = capabilities(str(tmp_path), {"shared-data": path, "scratch": plain})["volumes"]
    assert [v.get("storage_class") for v in found] == [None, "juicefs-sc"]
    assert "storage_class" not in found[0]  # a volume declared without a class reports none
    assert type(found[1]["path"]) is str and json.loads(json.dumps(found)) == found
    for bad in (f"x={tmp_path},class=", f"x={tmp_path},class=Bad Class", "x=relative,class=nfs"):
        with pytest.raises(ValueError):
            agent_volumes.parse_declaration(bad)


def test_the_agent_reports_whether_each_volume_exists_and_how_full(tmp_path):
    found = agent_volumes.report({"here": str(tmp_path), "gone": str(tmp_path / "nope")})
    assert [v["name"] for v in found] == ["gone", "here"]
    assert found[0] == {"name": "gone", "path": str(tmp_path / "nope"), "exists": False, "total_bytes": None,
                        "free_bytes": None}
    assert found[1]["exists"] is True and found[1]["total_bytes"] >= found[1]["free_bytes"] > 0


def test_every_process_gets_each_volumes_path_by_name(tmp_path):
    env = volumes.volume_env([volume(tmp_path), volume("/x", name="my.scratch-2")])
    assert env == {"TORCHYARD_VOLUME_SHARED_DATA": str(tmp_path), "TORCHYARD_VOLUME_MY_SCRATCH_2": "/x"}


def test_a_missing_volume_fails_the_node_naming_the_machine_and_path(tmp_path):
    volumes.check_present([volume(tmp_path)])
    with pytest.raises(VolumeError, match=rf"volume shared-data: {tmp_path}/gone does not exist on machine box-a"):
        volumes.check_present([volume(tmp_path / "gone")])
    assert issubclass(VolumeError, PrepareError)  # the supervisor fails the node before launch with it


def test_a_relative_mount_path_is_a_link_in_the_working_directory(tmp_path):
    shared, work = tmp_path / "shared", tmp_path / "work"
    shared.mkdir()
    work.mkdir()
    links = volumes.link_volumes([volume(shared, mount_path="inputs/data")], work)
    assert links == [work / "inputs" / "data"]
    assert os.readlink(work / "inputs" / "data") == str(shared)
    assert volumes.link_volumes([volume(shared, mount_path="inputs/data")], work) == links  # again: the same link


def test_an_absolute_mount_path_is_only_the_volumes_own_path(tmp_path):
    assert volumes.link_volumes([volume(tmp_path, mount_path=str(tmp_path))], tmp_path / "w") == []
    with pytest.raises(VolumeError, match="cannot mount without root"):
        volumes.link_volumes([volume(tmp_path, mount_path="/data")], tmp_path)


def test_a_mount_path_that_clashes_or_leaves_is_refused(tmp_path):
    (tmp_path / "data").mkdir()
    with pytest.raises(VolumeError, match="already a file or folder"):
        volumes.link_volumes([volume("/x", mount_path="data")], tmp_path)
    with pytest.raises(VolumeError, match="leaves"):
        volumes.link_volumes([volume("/x", mount_path="../out")], tmp_path / "data")


def hello(probes, rank: int = 1, machine: str = "box-b") -> dict:
    return {"node_rank": rank, "machine": machine, "volumes": [p.hello() for p in probes]}


def test_a_shared_volume_passes_and_the_writer_removes_its_file(tmp_path):
    probes = volumes.write_probes([volume(tmp_path, machine="box-b")], job_id=3, attempt=1, node_rank=1)
    assert probes[0].written.read_text() == probes[0].nonce
    assert probes[0].file.startswith(".torchyard/preflight-job3-attempt1-node1-")
    assert volumes.unshared([volume(tmp_path)], hello(probes)) == ""
    volumes.remove_probes(probes)
    assert not probes[0].written.exists()


def test_another_directory_on_each_machine_fails_naming_both(tmp_path):
    theirs, ours = tmp_path / "b", tmp_path / "a"
    theirs.mkdir()
    ours.mkdir()
    probes = volumes.write_probes([volume(theirs, machine="box-b")], job_id=3, attempt=0, node_rank=1)
    problem = volumes.unshared([volume(ours, machine="box-a")], hello(probes))
    assert "volume shared-data is not the same filesystem on box-b (node 1) and box-a (node 0, the master)" in problem
    assert "ReadWriteMany" in problem and "ReadWriteOnce" in problem


def test_a_wrong_nonce_a_missing_probe_or_a_path_elsewhere_fails(tmp_path):
    probes = volumes.write_probes([volume(tmp_path)], job_id=3, attempt=0, node_rank=1)
    forged = hello(probes)
    forged["volumes"][0]["nonce"] = "0" * 32
    assert volumes.unshared([volume(tmp_path)], forged)
    assert volumes.unshared([volume(tmp_path)], {"node_rank": 1})
    (tmp_path / "secret").write_text(probes[0].nonce)
    elsewhere = hello(probes)
    elsewhere["volumes"][0]["file"] = "secret"
    assert volumes.unshared([volume(tmp_path)], elsewhere)


def test_read_write_once_volumes_are_not_probed(tmp_path):
    once = volume(tmp_path, access_mode="ReadWriteOnce")
    assert volumes.write_probes([once], job_id=1, attempt=0, node_rank=1) == []
    assert volumes.unshared([once], {"node_rank": 1}) == ""


def test_the_cli_volume_option():
    assert volume_request("shared-data:/data") == {"name": "shared-data", "mount_path": "/data"}
    assert volume_request("s:x:ReadWriteOnce") == {"name": "s", "mount_path": "x", "access_mode": "ReadWriteOnce"}
    assert volume_request("s") == {"name": "s"}


def test_over_real_sockets_a_volume_that_differs_fails_both_sides_and_a_shared_one_passes(tmp_path):
    """The master reads the probe file while the node waits for its answer (preflight.py)."""
    same = Versions(python="3.11.7", torch="2.13.0")
    ours, theirs = tmp_path / "a", tmp_path / "b"
    ours.mkdir()
    theirs.mkdir()
    for node_path, fails in ((ours, False), (theirs, True)):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        listener = MasterListener(port)
        outcome: dict = {}

        def serve(listener=listener, outcome=outcome) -> None:
            try:
                outcome["peers"] = listener.serve(job_id=7, attempt=0, peers={1}, versions=same, tick=lambda _: None,
                                                  volumes=[volume(ours, machine="box-a")])
            except PreflightError as exc:
                outcome["error"] = str(exc)

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        probes = volumes.write_probes([volume(node_path, machine="box-b")], job_id=7, attempt=0, node_rank=1)
        greeting = {"job": 7, "attempt": 0, "node_rank": 1, "hostname": "h", "python": same.python,
                    "torch": same.torch} | hello(probes)
        try:
            if fails:
                with pytest.raises(PreflightError, match="not the same filesystem on box-b .* and box-a"):
                    reach_master("127.0.0.1", port, greeting, lambda _: None)
            else:
                reach_master("127.0.0.1", port, greeting, lambda _: None)
            thread.join(5)
        finally:
            volumes.remove_probes(probes)
            listener.close()
        assert ("error" in outcome) is fails
        assert not list((node_path / ".torchyard").iterdir())
