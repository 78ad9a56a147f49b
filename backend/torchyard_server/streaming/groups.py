"""Channel-layer group names, in one place, and sending to them from synchronous code."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from channels.layers import get_channel_layer

CLUSTER = "cluster"


def job_group(job_id: int) -> str:
    return f"job.{job_id}"


class GroupSender:
    """group_send from a synchronous loop (the ingest's) on one long-lived event loop of its own
    thread. async_to_sync would start an event loop per call, and channels_redis keeps its Redis
    connections per loop: a new connection (and its AUTH) for every message sent."""

    def __init__(self, layer: Any = None) -> None:
        self.layer = layer or get_channel_layer()
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="group-sender", daemon=True)
        self._thread.start()

    def send(self, messages: list[tuple[str, dict[str, Any]]], timeout: float = 30.0) -> None:
        """Send each (group, message): the groups at once, each group's messages in order. Raises
        the first failure once all are done."""
        by_group: dict[str, list[dict[str, Any]]] = {}
        for group, message in messages:
            by_group.setdefault(group, []).append(message)

        async def in_order(group: str, queued: list[dict[str, Any]]) -> None:
            for message in queued:
                await self.layer.group_send(group, message)

        async def send_all() -> None:
            results = await asyncio.gather(*(in_order(g, q) for g, q in by_group.items()), return_exceptions=True)
            for result in results:
                if isinstance(result, BaseException):
                    raise result

        asyncio.run_coroutine_threadsafe(send_all(), self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
