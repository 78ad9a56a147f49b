"""The agent's memory-checkpoint store (agent/memory.py) through its real HTTP routes on loopback, written
and read with the SDK's own transport (sdk/checkpoint/memory.py): what a job's ranks and buddies do."""

from __future__ import annotations

import hashlib
import http.client
import json

import pytest
from torchyard import protocol
from torchyard.agent.memory import KEEP_STEPS, MemoryHolder, MemoryServer
from torchyard.sdk.checkpoint import memory as memory_tier

KEY = "k" * 64


@pytest.fixture
def server():
    holder = MemoryHolder()
    srv = MemoryServer(holder, 0, host="127.0.0.1")
    srv.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.fixture
def keyed(monkeypatch):
    monkeypatch.setenv(protocol.ENV_MEMORY_KEY, KEY)


def _holder(srv: MemoryServer, name: str = "m1") -> memory_tier.Holder:
    return {"machine": name, "url": f"http://127.0.0.1:{srv.port}"}


def _put(replicator, holders, job, step, data: bytes):
    return replicator.put_all(holders, memory_tier.job_path(job, step, "state.pt"), memoryview(data),
                              hashlib.sha256(data).hexdigest())


def _request(srv, method, path, key=KEY, body=None, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
    try:
        conn.request(method, path, body=body, headers={"Authorization": f"Bearer {key}", **(headers or {})})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_a_save_is_kept_and_read_back_whole_from_any_holder(server, keyed):
    server.holder.admit(7, KEY, 1 << 20)
    other = MemoryServer(MemoryHolder(), 0, host="127.0.0.1")
    other.start()
    try:
        other.holder.admit(7, KEY, 1 << 20)
        data = bytes(range(256)) * 1000
        replicator = memory_tier.Replicator()
        assert _put(replicator, [_holder(server), _holder(other, "m2")], 7, 10, data) == ["m1", "m2"]
        # The same connection serves the next save (kept alive).
        assert _put(replicator, [_holder(server), _holder(other, "m2")], 7, 11, data[::-1]) == ["m1", "m2"]
        replicator.close()
        sha = hashlib.sha256(data).hexdigest()
        # The first holder is gone: the copy comes from the second.
        server.holder.free(7)
        got, machine = memory_tier.fetch([_holder(server), _holder(other, "m2")],
                                         memory_tier.job_path(7, 10, "state.pt"), len(data), sha)
        assert (bytes(got), machine) == (data, "m2")
        status, body = _request(other, "GET", "/jobs/7")
        assert status == 200 and sorted(json.loads(body)["steps"]) == ["10", "11"]
    finally:
        other.shutdown()
        other.server_close()


def test_a_holder_refuses_a_wrong_key_and_an_unknown_job_and_a_reader_a_corrupt_copy(server, keyed):
    server.holder.admit(3, KEY, 1 << 20)
    status, body = _request(server, "GET", "/jobs/3", key="wrong")
    assert status == 403 and b"wrong memory key" in body
    status, body = _request(server, "GET", "/jobs/4")
    assert status == 404 and b"job 4 holds no memory checkpoints here" in body
    with pytest.raises(memory_tier.MemoryTierError, match="m1 answered 404"):
        memory_tier.fetch([_holder(server)], memory_tier.job_path(3, 1, "state.pt"), 3,
                          hashlib.sha256(b"abc").hexdigest())
    # A copy that does not match its manifest's sha256 is not taken.
    status, _ = _request(server, "PUT", "/jobs/3/steps/1/state.pt", body=b"abc",
                         headers={"X-Sha256": hashlib.sha256(b"abd").hexdigest()})
    assert status == 201
    with pytest.raises(memory_tier.MemoryTierError, match="m1's copy fails its sha256 check"):
        memory_tier.fetch([_holder(server)], memory_tier.job_path(3, 1, "state.pt"), 3,
                          hashlib.sha256(b"abd").hexdigest())


def test_the_budget_keeps_the_newest_steps_and_refuses_what_cannot_fit_beside_the_last(server, keyed):
    server.holder.admit(5, KEY, 3000)
    replicator = memory_tier.Replicator()
    for step in (1, 2, 3):
        _put(replicator, [_holder(server)], 5, step, bytes([step]) * 1000)
    listing = server.holder.listing(5, KEY)
    assert sorted(listing, key=int) == ["2", "3"] and len(listing) == KEEP_STEPS
    # 2,500 bytes fit the budget alone, but not beside step 3, the copy to recover from meanwhile.
    with pytest.raises(memory_tier.MemoryTierError, match="507.*the budget must hold two saves"):
        _put(replicator, [_holder(server)], 5, 4, b"x" * 2500)
    with pytest.raises(memory_tier.MemoryTierError, match="507.*pass job 5's memory budget"):
        _put(replicator, [_holder(server)], 5, 4, b"x" * 3001)
    assert sorted(server.holder.listing(5, KEY), key=int) == ["3"]
    status, body = _request(server, "DELETE", "/jobs/5")
    assert status == 200 and json.loads(body)["freed_bytes"] == 1000
    assert server.holder.held_bytes() == 0


def test_a_restarted_agent_serves_on_the_port_it_had(tmp_path):
    from types import SimpleNamespace

    from torchyard.agent.main import Agent

    agent = SimpleNamespace(memory=MemoryHolder(), work_dir=tmp_path)
    first = Agent._memory_server(agent, 0)  # type: ignore[arg-type]
    port = first.port
    first.server_close()
    # Launches sent before the restart's first heartbeat name that port: the next agent takes it again.
    again = Agent._memory_server(agent, 0)  # type: ignore[arg-type]
    try:
        assert again.port == port and (tmp_path / "memory-port").read_text() == str(port)
        # Taken meanwhile (here: by the agent still holding it), a free one instead, remembered.
        other = Agent._memory_server(agent, 0)  # type: ignore[arg-type]
        assert other.port != port and (tmp_path / "memory-port").read_text() == str(other.port)
        other.server_close()
    finally:
        again.server_close()
