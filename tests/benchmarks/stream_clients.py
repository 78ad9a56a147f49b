"""The stream bench's clients: WebSocket and Server-Sent-Events followers of one job, in one asyncio loop.

Not a bench itself (run.py only discovers bench_*.py). Each client follows the job from its cursor,
resumes from it when the server drops it (the WebSocket close code that says "resume": it fell
behind), and keeps what the bench checks: every event once and in order (ids strictly increasing,
each frame's `prev` equal to the last id it had), the number of events, and for every rank line
stamped by the bench's rank script (`<epoch seconds> r<rank> <phase><n> ...`) the delay from the
rank's write to the receipt of the frame that carried it.

A client checks each frame from its header (`prev`, `last`, `count`, which the server writes first)
and finds the stamps of its lines with a regular expression, an SSE event from its `id:` line: the
bench's 22 clients must not take the CPU the stack under test needs, so nothing is decoded whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import websockets
from torchyard.stream_contract import CLOSE_RESUME  # fell behind: resume from your cursor
from websockets.asyncio.client import connect as ws_connect

# A frame's header, as consumers.py writes it: {"type":"events","prev":P,"last":L,"count":N,...
HEADER = re.compile(r'^\{"type":"events","prev":(-?\d+|null),"last":(\d+),"count":(\d+)')
# The write time the rank script put at the start of a line, as it appears in an event's JSON.
STAMP = re.compile(r'"line":"(\d+\.\d+) r\d+ [pf]\d+ ')


@dataclass
class Follower:
    """What one client saw."""

    name: str
    kind: str  # "ws" or "sse"
    cursor: int = 0
    events: int = 0
    frames: int = 0
    duplicates: int = 0  # events at or below the cursor
    gaps: int = 0  # frames whose `prev` was above the last id this client had: events missed
    closes: Counter[Any] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)
    record: bool = False  # record the delay of every stamped line

    def take_frame(self, raw: str, now: float) -> None:
        header = HEADER.match(raw)
        if header is None:
            if raw.startswith('{"type":"events"'):  # a frame without the header: read it whole
                self.frames += 1
                self.take_events(json.loads(raw)["events"], now)
            return
        self.frames += 1
        prev = None if header.group(1) == "null" else int(header.group(1))
        last, count = int(header.group(2)), int(header.group(3))
        if last <= self.cursor:
            self.duplicates += count
            return
        if prev is not None and prev > self.cursor:
            self.gaps += 1
        self.cursor, self.events = last, self.events + count
        if self.record:
            self.latencies.extend(now - float(stamp) for stamp in STAMP.findall(raw))

    def take_events(self, events: list[dict[str, Any]], now: float) -> None:
        for event in events:
            if event["id"] <= self.cursor:
                self.duplicates += 1
                continue
            self.cursor = event["id"]
            self.events += 1
            if self.record and event.get("type") == "log":
                stamp = stamped(event.get("line") or "")
                if stamp is not None:
                    self.latencies.append(now - stamp)


def stamped(line: str) -> float | None:
    """The write time the rank script put at the start of a line; None for other lines."""
    head, _, rest = line.partition(" ")
    if not rest.startswith("r") or "." not in head:
        return None
    try:
        return float(head)
    except ValueError:
        return None


async def follow_ws(client: Follower, url: str, token: str, stop: asyncio.Event) -> None:
    """Follow the job's WebSocket from the client's cursor until `stop`; reconnect when dropped,
    at once when the server said to resume."""
    while not stop.is_set():
        code: Any = None
        try:
            async with ws_connect(f"{url}?after={client.cursor}", additional_headers={"Authorization": f"Token {token}"},
                                  max_size=None, open_timeout=30, ping_interval=None) as ws:
                while not stop.is_set():
                    try:
                        raw = await asyncio.wait_for(ws.recv(), timeout=0.5)
                    except TimeoutError:
                        continue
                    client.take_frame(raw, time.time())  # type: ignore[arg-type]
                return
        except websockets.ConnectionClosed as exc:
            code = exc.rcvd.code if exc.rcvd is not None else "no close frame"
        except (OSError, websockets.WebSocketException, TimeoutError) as exc:
            code = type(exc).__name__
        client.closes[code] += 1
        if code != CLOSE_RESUME:
            await asyncio.sleep(0.5)


async def follow_sse(client: Follower, url: str, token: str, stop: asyncio.Event) -> None:
    """Follow the job's Server-Sent-Events log stream; resume with Last-Event-ID when it ends.
    Each `data:` is an event, or a list of them, or {"events": [...]}."""
    while not stop.is_set():
        try:
            await _sse_session(client, url, token, stop)
        except (OSError, ValueError, asyncio.IncompleteReadError) as exc:
            client.closes[type(exc).__name__] += 1
            await asyncio.sleep(0.5)


async def _sse_session(client: Follower, url: str, token: str, stop: asyncio.Event) -> None:
    match = re.match(r"http://([^:/]+):(\d+)(/.*)", url)
    assert match, url
    host, port, path = match.group(1), int(match.group(2)), match.group(3)
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write((f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Token {token}\r\n"
                      f"Accept: text/event-stream\r\nLast-Event-ID: {client.cursor}\r\nConnection: close\r\n\r\n").encode())
        await writer.drain()
        status = (await reader.readline()).decode()
        if " 200 " not in status:
            client.errors[status.strip()] += 1
            await asyncio.sleep(1.0)
            return
        chunked = False
        while (line := await reader.readline()) not in (b"\r\n", b""):
            chunked |= line.lower().startswith(b"transfer-encoding:") and b"chunked" in line.lower()
        buffer = b""
        while not stop.is_set():
            try:
                chunk = await asyncio.wait_for(_read_chunk(reader, chunked), timeout=0.5)
            except TimeoutError:
                continue
            if not chunk:
                client.closes["eof"] += 1
                return
            buffer += chunk
            now = time.time()
            *messages, buffer = buffer.split(b"\n\n")
            for message in messages:
                _take_sse(client, message.decode(), now)
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


async def _read_chunk(reader: asyncio.StreamReader, chunked: bool) -> bytes:
    if not chunked:
        return await reader.read(1 << 16)
    size = int((await reader.readline()).strip() or b"0", 16)
    if size == 0:
        return b""
    data = await reader.readexactly(size)
    await reader.readline()
    return data


def _take_sse(client: Follower, message: str, now: float) -> None:
    """An `id:` message is an event (its id is all this client checks, besides the stamp of a line
    while timing); anything else (retry, keep-alive, end) is not."""
    if not message.startswith("id: "):
        return
    client.frames += 1
    event_id = int(message[4:message.index("\n")])
    if event_id <= client.cursor:
        client.duplicates += 1
        return
    client.cursor, client.events = event_id, client.events + 1
    if client.record and (stamp := STAMP.search(message)):
        client.latencies.append(now - float(stamp.group(1)))
