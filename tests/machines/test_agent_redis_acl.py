"""Each agent's own Redis user (machines/redis_acl.py), on a Redis started as embedded mode starts it
(a password for the default user): machine A's credentials reach A's queue and streams and nothing
of machine B's or the controller's, and A's real agent does all it has to with them."""

from __future__ import annotations

import secrets
import subprocess
import sys
import time

import pytest
import redis
from celery import Celery
from rest_framework.test import APIClient
from torchyard import protocol
from torchyard_server.machines import redis_acl
from torchyard_server.machines.services import machine_create, machine_delete, machine_rotate_token
from torchyard_server.runtime.embedded_redis import start_redis

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def acl_redis(tmp_path_factory):
    server = start_redis(tmp_path_factory.mktemp("acl-redis"), password=secrets.token_urlsafe(24))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def admin(acl_redis, settings):
    settings.REDIS_URL = settings.AGENT_REDIS_URL = acl_redis.url
    settings.REDIS_AGENT_ACL = True
    client = redis.Redis.from_url(acl_redis.url)
    client.flushdb()
    client.acl_log_reset()
    for user in client.acl_users():
        if user != "default":
            client.acl_deluser(user)
    return client


def agent_url(token: str) -> str:
    response = APIClient().get("/api/agent/config", HTTP_AUTHORIZATION=f"Machine {token}")
    assert response.status_code == 200
    return response.json()["redis_url"]


def denied(call) -> bool:
    try:
        call()
    except redis.exceptions.NoPermissionError:
        return True
    return False


def test_an_agent_reaches_its_own_queue_and_streams_and_nothing_of_another_machine(admin):
    (a, token_a), (b, _) = machine_create(name="a", host="h"), machine_create(name="b", host="h")
    url = agent_url(token_a)
    assert url.startswith(f"redis://agent-{a.pk}:") and redis_acl.password(a) in url
    admin.lpush(protocol.machine_queue(b.pk), "launch with b's secrets")
    admin.hset("unacked", "tag", "every client's unfinished tasks")
    admin.set("torchyard:chasgi:group", "channel layer")
    own = redis.Redis.from_url(url)

    own.xadd(protocol.machine_event_stream(a.pk), {"e": "{}"})
    own.xadd(protocol.machine_liveness_stream(a.pk), {"e": "{}"})
    own.lpush(protocol.machine_queue(a.pk), "task")
    assert own.brpop([protocol.machine_queue(a.pk)], timeout=1)[1] == b"task"
    own.hset(protocol.machine_unacked_keys(a.pk)["unacked_key"], "tag", "mine")

    for stream in (protocol.machine_event_stream(b.pk), protocol.machine_liveness_stream(b.pk),
                   protocol.EVENT_STREAM, protocol.LIVENESS_STREAM):
        assert denied(lambda s=stream: own.xadd(s, {"e": "{}"})), stream
    assert own.xlen(protocol.machine_event_stream(a.pk)) == 1
    assert denied(lambda: own.xrange(protocol.machine_event_stream(a.pk)))  # adds and counts, no more
    queue_b = protocol.machine_queue(b.pk)
    assert denied(lambda: own.brpop([queue_b], timeout=1))
    assert denied(lambda: own.lrange(queue_b, 0, -1))
    assert denied(lambda: own.lpush(queue_b, "a task for b"))
    assert denied(lambda: own.hgetall("unacked"))
    assert denied(lambda: own.hget(protocol.machine_unacked_keys(b.pk)["unacked_key"], "tag"))
    assert denied(lambda: own.get("torchyard:chasgi:group"))
    assert denied(lambda: own.scan())
    assert denied(lambda: own.publish("/0.celery.pidbox", "broadcast"))
    assert denied(lambda: own.client_list())
    assert denied(lambda: own.execute_command("CLIENT", "PAUSE", "1000"))
    assert denied(lambda: own.acl_users())
    assert admin.llen(queue_b) == 1


def test_rotating_a_token_changes_the_password_and_removing_the_machine_removes_the_user(admin):
    machine, token = machine_create(name="a", host="h")
    old = agent_url(token)
    assert redis.Redis.from_url(old).ping()
    new_token = machine_rotate_token(machine=machine)
    with pytest.raises(redis.exceptions.AuthenticationError):
        redis.Redis.from_url(old).ping()
    assert redis.Redis.from_url(agent_url(new_token)).ping()

    # A restarted Redis has no users: the sync writes them again.
    admin.acl_deluser(f"agent-{machine.pk}")
    assert redis_acl.sync_agent_users() == {"written": [machine.pk], "removed": []}
    assert redis_acl.sync_agent_users() == {"written": [], "removed": []}

    connected = redis.Redis.from_url(agent_url(new_token))
    connected.ping()
    machine_id = machine.pk
    machine_delete(machine=machine)
    # What waits in its queue for the connected agent (its shutdown task, which the server's Celery
    # app sends to the test's other Redis): the user stays until the agent has taken it.
    admin.lpush(protocol.machine_queue(machine_id), "shutdown")
    assert redis_acl.sync_agent_users()["removed"] == []
    connected.brpop([protocol.machine_queue(machine_id)], timeout=1)
    assert redis_acl.sync_agent_users()["removed"] == [machine_id]
    assert f"agent-{machine_id}" not in admin.acl_users()
    with pytest.raises(redis.exceptions.ConnectionError):
        connected.ping()


def test_an_agent_serves_its_queue_and_remote_control_with_its_own_user(admin, acl_redis, tmp_path):
    machine, token = machine_create(name="a", host="127.0.0.1")
    agent = subprocess.Popen(
        [sys.executable, "-m", "torchyard.cli", "agent", "--token", token, "--redis-url", agent_url(token),
         "--work-dir", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    controller = Celery("controller", broker=acl_redis.url)
    try:
        liveness = protocol.machine_liveness_stream(machine.pk)
        deadline = time.monotonic() + 60
        while not (admin.xlen(liveness) and controller.control.ping(timeout=0.5)):
            assert agent.poll() is None and time.monotonic() < deadline, agent.stdout.read().decode()
        # A stop for a node it never ran: the agent answers with a `stopped` event on its own stream.
        controller.send_task(protocol.TASK_STOP_NODE, kwargs={"job_id": 1, "attempt": 0, "node_rank": 0, "node_id": 7},
                             queue=protocol.machine_queue(machine.pk))
        events = protocol.machine_event_stream(machine.pk)
        while not admin.xlen(events):
            assert time.monotonic() < deadline, "no stopped event"
            time.sleep(0.2)
        assert protocol.decode_event(admin.xrange(events)[0][1])["node"] == 7
        controller.send_task(protocol.TASK_SHUTDOWN, kwargs={"reason": "test"}, queue=protocol.machine_queue(machine.pk))
        assert agent.wait(timeout=60) == 0
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
    log = agent.stdout.read().decode()
    assert "shutdown requested by the control plane: test" in log, log
    # Nothing it did was refused: Redis logs every denial.
    assert admin.acl_log() == [], [(e["object"], e["client-info"].get("cmd")) for e in admin.acl_log()]
