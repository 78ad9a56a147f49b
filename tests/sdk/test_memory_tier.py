"""The SDK's memory tier (sdk.checkpoint.save(tier="memory"), memory_due, load_latest from a memory resume)
against real agents' memory stores (agent/memory.py) on loopback: what is sent, what is committed, and
what a recovery reads, from the first holder whose copy is whole, or from the store when none is."""

from __future__ import annotations

import json
import socket

import pytest
import torch
from torchyard import protocol
from torchyard.agent.memory import MemoryHolder, MemoryServer
from torchyard.sdk import checkpoint

KEY = "m" * 64
JOB = 9


@pytest.fixture
def stores():
    made = []
    for _ in range(2):
        holder = MemoryHolder()
        holder.admit(JOB, KEY, 64 << 20)
        server = MemoryServer(holder, 0, host="127.0.0.1")
        server.start()
        made.append(server)
    yield made
    for server in made:
        server.shutdown()
        server.server_close()


@pytest.fixture
def events(tmp_path, monkeypatch):
    path = str(tmp_path / "events.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as receiver:
        receiver.bind(path)
        receiver.settimeout(10)
        monkeypatch.setenv("TORCHYARD_EVENT_SOCKET", path)
        yield receiver


def holders(stores) -> list[dict[str, str]]:
    return [{"machine": f"m{i}", "url": f"http://127.0.0.1:{s.port}"} for i, s in enumerate(stores)]


def configure(tmp_path, monkeypatch, memory: dict, resume_uri: str = "") -> None:
    # A new file each time: the SDK reads a job's config once (a job's never changes).
    config = tmp_path / f"config-{len(list(tmp_path.glob('config-*.json')))}.json"
    config.write_text(json.dumps({"checkpointing": {"enabled": True, "memory": memory}}))
    monkeypatch.setenv(protocol.ENV_CONFIG, str(config))
    monkeypatch.setenv(protocol.ENV_MEMORY_KEY, KEY)
    monkeypatch.setenv(protocol.ENV_JOB_ID, str(JOB))
    if resume_uri:
        monkeypatch.setenv(protocol.ENV_RESUME_MANIFEST, resume_uri)


def test_a_memory_save_goes_to_every_holder_and_is_committed_as_the_memory_tier(tmp_path, monkeypatch, stores, events):
    configure(tmp_path, monkeypatch, {"every_n_steps": 2, "holders": holders(stores)})
    assert [step for step in range(1, 7) if checkpoint.memory_due(step)] == [2, 4, 6]
    weights = torch.arange(1000, dtype=torch.float32)
    pending = checkpoint.save({"w": weights, "rng": checkpoint.rng_state()}, 4, tier="memory")
    weights.mul_(-1)  # the loop goes on at once: the save holds its own copy
    assert pending.result(timeout=60) is True
    event = json.loads(events.recv(1 << 16))
    assert (event["type"], event["step"], event["uri"]) == ("checkpoint", 4, f"memory://job-{JOB}/step-4")
    manifest = event["manifest"]
    assert manifest["tier"] == "memory" and manifest["rng_state"] is True and manifest["save"]["async"] is True
    (entry,) = manifest["files"]
    assert entry["path"] == "state.pt" and entry["holders"] == ["m0", "m1"]
    for store in stores:
        assert store.holder.listing(JOB, KEY) == {"4": {"state.pt": {"size": entry["size"], "sha256": entry["sha256"]}}}
    assert not (tmp_path / "checkpoints").exists()  # nothing went to the store

    # A recovery that resumes from it: the first holder's copy is gone, the second's is read.
    stores[0].holder.free(JOB)
    configure(tmp_path, monkeypatch, {"every_n_steps": 2, "holders": holders(stores),
                                      "resume": {"manifest": manifest, "holders": holders(stores)}},
              resume_uri=f"memory://job-{JOB}/step-4")
    state, step, loaded = checkpoint.load_latest()
    assert step == 4 and loaded == manifest
    assert torch.equal(state["w"], torch.arange(1000, dtype=torch.float32))


def test_a_memory_resume_no_holder_can_serve_falls_back_to_the_store(tmp_path, monkeypatch, stores, events, capfd):
    configure(tmp_path, monkeypatch, {"every_n_steps": 1, "holders": holders(stores)})
    assert checkpoint.save({"w": torch.ones(3)}, 3) is True  # the store's
    assert checkpoint.save({"w": torch.full((3,), 5.0)}, 5, tier="memory").result(timeout=60) is True
    json.loads(events.recv(1 << 16))  # the store's commit
    manifest = json.loads(events.recv(1 << 16))["manifest"]
    for store in stores:
        store.holder.free(JOB)  # both copies gone, as when both agents restarted
    configure(tmp_path, monkeypatch, {"every_n_steps": 1, "holders": holders(stores),
                                      "resume": {"manifest": manifest, "holders": holders(stores)}},
              resume_uri=f"memory://job-{JOB}/step-5")
    state, step, _ = checkpoint.load_latest()
    assert step == 3 and torch.equal(state["w"], torch.ones(3))
    err = capfd.readouterr().err
    assert "the memory checkpoint memory://job-9/step-5 cannot be read: m0 answered 404" in err
    assert "resuming from the store's newest checkpoint instead" in err


def test_a_failed_memory_save_commits_nothing_and_says_why_once(tmp_path, monkeypatch, stores, capfd):
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    port = dead.getsockname()[1]
    dead.close()  # nothing listens there: a buddy that is down
    configure(tmp_path, monkeypatch, {"every_n_steps": 1, "holders": [
        {"machine": "m0", "url": f"http://127.0.0.1:{stores[0].port}"}, {"machine": "down", "url": f"http://127.0.0.1:{port}"}]})
    for step in (1, 2):
        assert checkpoint.save({"w": torch.ones(3)}, step, tier="memory").result(timeout=60) is False
    err = capfd.readouterr().err
    assert err.count("memory checkpoint at step") == 1 and "down (http://127.0.0.1:" in err
    with pytest.raises(ValueError, match="tier must be 'disk' or 'memory'"):
        checkpoint.save({"w": torch.ones(3)}, 3, tier="ram")
    with pytest.raises(ValueError, match="replicated state"):
        checkpoint.save({"w": torch.ones(3)}, 3, tier="memory", sharded=True)
