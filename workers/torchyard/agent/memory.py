"""Memory checkpoints this machine holds for its jobs (`checkpointing.memory`).

Why the agent: it is the one process of a machine that outlives every attempt of a job. A rank's
memory dies with the rank and a node supervisor's with its attempt, so a copy either of them held
would be gone exactly when a recovery needs it; the agent lives until the machine (or the agent
itself) goes, which is the failure the buddy's copy on another machine covers.

The bytes come straight from the saving rank (the SDK's memory tier,
torchyard.sdk.checkpoint.memory) over HTTP on the address the job's preflight chose for its
traffic, never through Redis or the web server: ``PUT /jobs/<job>/steps/<step>/<name>`` with the
body's sha256 in ``X-Sha256`` (kept with it, and checked by whoever reads it back: a torn transfer is
refused, a corrupt copy is skipped for another holder's), ``GET`` the same path to read it back, ``GET /jobs/<job>`` for what is held and
``DELETE /jobs/<job>`` to free it. Every request carries the job's memory key (``Authorization:
Bearer``), which the control plane derives per job and sends in each of its launches: an agent
serves a job only once it launched one of its nodes, and only to holders of the key.

Bounded: a job has a budget of bytes on each machine (checkpointing.memory.budget; the planner
refused machines without that much memory free). A job keeps its newest KEEP_STEPS steps here (the
newest committed one, and the one being written); a save that would pass the budget first evicts
the job's older steps, and is refused (507) when it still does not fit. The control plane frees a
job's memory when the job ends (protocol.TASK_FREE_MEMORY); an agent that restarts holds nothing.
"""

from __future__ import annotations

import hmac
import json
import logging
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

log = logging.getLogger("torchyard.agent.memory")

# The steps of one job a machine keeps: the newest committed one and the one being saved.
KEEP_STEPS = 2
CHUNK = 1 << 20
_PATH = re.compile(r"^/jobs/(\d+)(?:/steps/(\d+)/([A-Za-z0-9._-]{1,200}))?$")


@dataclass
class Blob:
    data: bytearray
    sha256: str


@dataclass
class JobMemory:
    key: str
    budget: int
    steps: dict[int, dict[str, Blob]] = field(default_factory=dict)

    def held(self, besides: tuple[int, str] | None = None) -> int:
        return sum(len(b.data) for step, blobs in self.steps.items() for name, b in blobs.items()
                   if (step, name) != besides)


class Refused(Exception):
    """A request the holder cannot take: the HTTP status and why, for the saving rank's warning."""

    def __init__(self, status: int, why: str):
        super().__init__(why)
        self.status = status


class MemoryHolder:
    """What the agent keeps: per job, its key, its budget and its newest steps' blobs."""

    def __init__(self) -> None:
        self._jobs: dict[int, JobMemory] = {}
        self._lock = threading.Lock()

    def admit(self, job_id: int, key: str, budget: int) -> None:
        """A node of the job launched here: its ranks and its buddies may store and read now."""
        with self._lock:
            held = self._jobs.get(job_id)
            if held is None or held.key != key:
                self._jobs[job_id] = JobMemory(key=key, budget=int(budget))
            else:
                held.budget = int(budget)

    def _job(self, job_id: int, key: str) -> JobMemory:
        held = self._jobs.get(job_id)
        if held is None or not hmac.compare_digest(held.key, key):
            raise Refused(403 if held else 404, f"job {job_id} holds no memory checkpoints here"
                          if held is None else f"wrong memory key for job {job_id}")
        return held

    def reserve(self, job_id: int, key: str, step: int, name: str, size: int) -> None:
        """Make room for a blob of `size` bytes before it is read: the job's older steps go (KEEP_STEPS
        kept in all, this one included), never the newest other one, which stays the copy to
        recover from should this save not complete; what still passes the budget is refused."""
        with self._lock:
            job = self._job(job_id, key)
            if size > job.budget:
                raise Refused(507, f"{size} bytes pass job {job_id}'s memory budget of {job.budget} bytes on this "
                                   "machine (checkpointing.memory.budget)")
            others = sorted(s for s in job.steps if s != step)
            while len(others) > 1 and (len(others) + 1 > KEEP_STEPS
                                       or job.held(besides=(step, name)) + size > job.budget):
                del job.steps[others.pop(0)]
            if job.held(besides=(step, name)) + size > job.budget:
                raise Refused(507, f"{size} bytes do not fit in job {job_id}'s memory budget of {job.budget} bytes on "
                                   "this machine beside the last step it holds: the budget must hold two saves")

    def store(self, job_id: int, key: str, step: int, name: str, blob: Blob) -> None:
        with self._lock:
            self._job(job_id, key).steps.setdefault(step, {})[name] = blob

    def read(self, job_id: int, key: str, step: int, name: str) -> Blob:
        with self._lock:
            blob = self._job(job_id, key).steps.get(step, {}).get(name)
        if blob is None:
            raise Refused(404, f"step {step} of job {job_id} has no {name} here")
        return blob

    def listing(self, job_id: int, key: str) -> dict[str, dict[str, dict[str, object]]]:
        with self._lock:
            job = self._job(job_id, key)
            return {str(step): {name: {"size": len(b.data), "sha256": b.sha256} for name, b in blobs.items()}
                    for step, blobs in sorted(job.steps.items())}

    def free(self, job_id: int, key: str | None = None) -> int:
        """Drop everything held for the job (it ended); the bytes freed. With `key` (a request's), only
        for a holder of the job's key."""
        with self._lock:
            if key is not None:
                self._job(job_id, key)
            job = self._jobs.pop(job_id, None)
        return 0 if job is None else job.held()

    def held_bytes(self) -> int:
        with self._lock:
            return sum(job.held() for job in self._jobs.values())


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: a rank saving every step reuses its connection
    server: MemoryServer

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's name
        log.debug("%s " + format, self.client_address[0], *args)

    def _route(self) -> tuple[int, int | None, str | None, str]:
        match = _PATH.match(self.path)
        if match is None:
            raise Refused(404, f"no such path: {self.path}")
        auth = self.headers.get("Authorization", "")
        if not auth.startswith("Bearer "):
            raise Refused(401, "a job's memory key is needed (Authorization: Bearer)")
        job, step, name = match.groups()
        return int(job), None if step is None else int(step), name, auth.removeprefix("Bearer ").strip()

    def _answer(self, status: int, body: bytes | dict, content_type: str = "application/json",
                extra: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode() if isinstance(body, dict) else body
        self.send_response(status)
        if self.close_connection:
            self.send_header("Connection", "close")  # the client opens a new one for its next request
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _refused(self, exc: Refused) -> None:
        self._answer(exc.status, {"error": str(exc)})

    def do_PUT(self) -> None:  # noqa: N802 - http.server's name
        try:
            job, step, name, key = self._route()
            if step is None or name is None:
                raise Refused(405, "PUT a step's file: /jobs/<job>/steps/<step>/<name>")
            size = int(self.headers.get("Content-Length") or -1)
            expected = self.headers.get("X-Sha256", "")
            if size < 0 or not expected:
                raise Refused(400, "Content-Length and X-Sha256 are needed")
            self.server.holder.reserve(job, key, step, name, size)
        except Refused as exc:
            self.close_connection = True  # the body, if any, is not read
            return self._refused(exc)
        # Read at the socket's pace, not hashed here: whoever reads the copy back checks it against the
        # manifest's sha256 (and takes another holder's when it fails), so hashing on the way in would
        # only halve the rate at which a save reaches its buddy.
        data = bytearray(size)
        view, got = memoryview(data), 0
        while got < size:
            n = self.rfile.readinto(view[got:got + CHUNK])
            if not n:
                break
            got += n
        if got < size:
            self.close_connection = True
            return self._answer(400, {"error": f"{got} of {size} bytes arrived"})
        try:
            self.server.holder.store(job, key, step, name, Blob(data, expected))
        except Refused as exc:  # freed while it arrived: the job ended
            return self._refused(exc)
        self._answer(201, {"size": size, "sha256": expected})

    def do_GET(self) -> None:  # noqa: N802
        try:
            job, step, name, key = self._route()
            if step is None or name is None:
                return self._answer(200, {"job": job, "steps": self.server.holder.listing(job, key)})
            blob = self.server.holder.read(job, key, step, name)
        except Refused as exc:
            return self._refused(exc)
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(blob.data)))
        self.send_header("X-Sha256", blob.sha256)
        self.end_headers()
        view = memoryview(blob.data)
        for start in range(0, len(view), CHUNK * 8):
            self.wfile.write(view[start:start + CHUNK * 8])

    def do_DELETE(self) -> None:  # noqa: N802
        try:
            job, step, _, key = self._route()
            if step is not None:
                raise Refused(405, "DELETE frees a whole job: /jobs/<job>")
            freed = self.server.holder.free(job, key)
        except Refused as exc:
            return self._refused(exc)
        self._answer(200, {"job": job, "freed_bytes": freed})


class MemoryServer(ThreadingHTTPServer):
    """The holder behind its HTTP routes, on every address of the machine (the job's chosen network
    among them) at `port` (0: one the system picks, which the heartbeats report)."""

    daemon_threads = True

    def __init__(self, holder: MemoryHolder, port: int = 0, host: str = "0.0.0.0"):
        self.holder = holder
        super().__init__((host, port), _Handler)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.serve_forever, daemon=True, name="memory-checkpoints")
        thread.start()
        return thread
