"""Whatever a client sends on a stream, under Hypothesis: text, bytes, JSON of any shape. The
streams only send, so each frame gets an error that says so, and the stream goes on: it still
delivers what happens next. A consumer that raised would end the connection (1011) instead.

Through the project's whole ASGI application (origin check, token auth, routing), a real channel
layer on Redis and the test database, with Channels' test communicator."""

from __future__ import annotations

import asyncio
import json

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torchyard_server.live import groups
from torchyard_server.live.inbound import NOT_TAKEN

pytestmark = pytest.mark.django_db(transaction=True)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=10,
)
# What a client may send (as the ASGI server hands it over): any text, JSON or not, empty too; JSON
# that looks like a request; any bytes.
frames = (
    st.builds(lambda text: {"text": text}, st.text(max_size=200))
    | st.builds(lambda value: {"text": json.dumps(value)}, json_values)
    | st.builds(lambda value: {"text": json.dumps(value)},
                st.fixed_dictionaries({"type": st.sampled_from(["subscribe", "ping", "events", "after", ""])},
                                      optional={"after": json_values, "job": json_values}))
    | st.builds(lambda data: {"bytes": data}, st.binary(max_size=200))
)



@pytest.fixture
def loop():
    """The test's own event loop, driven from sync code (Hypothesis calls its tests so)."""
    loop = asyncio.new_event_loop()
    yield loop
    # What the web process started on it besides (its telemetry reporter) ends with it.
    pending = asyncio.all_tasks(loop)
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.wait(pending, timeout=5))
    loop.close()


class Stream:
    """One WebSocket connection through the whole ASGI application."""

    def __init__(self, loop, path: str, headers) -> None:
        from torchyard_server.asgi import application

        self.loop = loop
        self.communicator = WebsocketCommunicator(application, path, headers=headers)

    def run(self, coroutine):
        return self.loop.run_until_complete(coroutine)

    def connect(self) -> None:
        connected, _ = self.run(self.communicator.connect(timeout=10))
        assert connected

    def next_frame(self) -> dict:
        """The next thing sent to the client; raises what the consumer raised, if it did."""
        try:
            return self.run(self.communicator.receive_output(timeout=10))
        except TimeoutError:
            raise AssertionError("the stream sent nothing for 10 s") from None

    def until(self, predicate) -> dict:
        while True:
            output = self.next_frame()
            assert output["type"] == "websocket.send", f"the stream ended: {output}"
            if predicate(json.loads(output["text"])):
                return output

    def close(self) -> None:
        self.run(self.communicator.disconnect())


def each_frame_is_answered(stream: Stream) -> None:
    @settings(max_examples=150, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
    @given(frame=frames)
    def send(frame):
        stream.run(stream.communicator.send_input({"type": "websocket.receive", **frame}))
        output = stream.next_frame()
        assert output == {"type": "websocket.send", "text": NOT_TAKEN}

    send()


def test_a_job_stream_answers_any_frame_with_an_error_and_goes_on(loop, member, job):
    stream = Stream(loop, f"/api/jobs/{job.pk}/stream", member)
    try:
        stream.connect()
        stream.until(lambda frame: frame["type"] == "replayed")
        each_frame_is_answered(stream)
        # Still live: a change of the job reaches the client.
        async_to_sync(get_channel_layer().group_send)(groups.job_group(job.pk), {"type": "job.changed"})
        assert json.loads(stream.until(lambda frame: frame["type"] == "job")["text"])["job"]["id"] == job.pk
    finally:
        stream.close()


def test_the_cluster_stream_answers_any_frame_with_an_error_and_goes_on(loop, member):
    stream = Stream(loop, "/api/cluster/stream", member)
    try:
        stream.connect()
        stream.until(lambda frame: frame["type"] == "jobs")
        each_frame_is_answered(stream)
        # Still live: a broadcast of the machines reaches the client.
        async_to_sync(get_channel_layer().group_send)(groups.CLUSTER, {
            "type": "cluster.machines", "machines": json.dumps([{"id": 1, "name": "late"}])})
        assert json.loads(stream.until(lambda frame: frame["type"] == "machines")["text"])["machines"][0]["name"] == "late"
    finally:
        stream.close()


@settings(max_examples=40, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(after=st.text(max_size=30))
def test_any_resume_cursor_replays_from_the_start_or_from_it(loop, member, job, after):
    from urllib.parse import quote

    stream = Stream(loop, f"/api/jobs/{job.pk}/stream?after={quote(after)}", member)
    try:
        stream.connect()
        replayed = json.loads(stream.until(lambda frame: frame["type"] == "replayed")["text"])
        cursor = int(after) if after.isascii() and after.isdigit() else 0
        assert replayed["last_id"] == cursor
    finally:
        stream.close()
