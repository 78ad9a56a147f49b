"""The ingest's sender (live/groups.py): send() hands a batch to its own event loop and returns, yet
batches reach a group in the order sent, and no more than its bound wait there."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import pytest
from channels.layers import get_channel_layer
from torchyard_server.live.groups import GroupSender


def test_batches_sent_without_waiting_reach_the_group_in_the_order_sent():
    layer = get_channel_layer()
    group = f"job.order-{uuid.uuid4().hex}"
    loop = asyncio.new_event_loop()
    channel = loop.run_until_complete(layer.new_channel())
    loop.run_until_complete(layer.group_add(group, channel))
    sender = GroupSender(layer)
    try:
        for n in range(300):
            sender.send([(group, {"type": "job.events", "n": n}), (group, {"type": "job.changed", "n": n})])
        received = [loop.run_until_complete(asyncio.wait_for(layer.receive(channel), timeout=10))
                    for _ in range(600)]
        assert [(m["n"], m["type"]) for m in received] == [(n, t) for n in range(300)
                                                           for t in ("job.events", "job.changed")]
    finally:
        loop.run_until_complete(layer.group_discard(group, channel))
        loop.close()
        sender.close()


class StuckLayer:
    """A channel layer whose sends wait until it is let go."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.sent: list[int] = []

    async def group_send(self, group: str, message: dict) -> None:
        while not self.go.is_set():
            await asyncio.sleep(0.01)
        self.sent.append(message["n"])


def test_a_layer_that_takes_nothing_makes_send_wait_once_the_bound_is_reached():
    layer = StuckLayer()
    sender = GroupSender(layer, max_pending=3)
    try:
        for n in range(3):
            sender.send([("job.1", {"n": n})], timeout=1)
        with pytest.raises(TimeoutError):
            sender.send([("job.1", {"n": 3})], timeout=0.2)
        layer.go.set()
        sender.send([("job.1", {"n": 4})], timeout=5)  # room again once the layer takes them
        deadline = time.monotonic() + 5
        while len(layer.sent) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert layer.sent == [0, 1, 2, 4]
    finally:
        sender.close()
