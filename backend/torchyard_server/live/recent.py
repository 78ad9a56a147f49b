"""The last live frames of each job followed in this web process, shared by its consumers: a client
that fell behind catches up from here, frames already written, rather than from the database.

Channels hands every consumer of a job in a process the same group message (channels_redis keeps one
copy per process), so a frame's text exists once here however many clients follow the job; this
keeps references to the last RECENT_BYTES of them per job, and nothing per client. A job's frames
are kept while one of its consumers is open in the process.
"""

from __future__ import annotations

from collections import deque

from .frames import LiveFrame

# Per job: about 6 s of a 5,000 events/s job, what a client that stalled for a moment needs.
RECENT_BYTES = 8 << 20


class RecentFrames:
    def __init__(self) -> None:
        self.frames: deque[LiveFrame] = deque()
        self.size = 0
        self.followers = 0

    def add(self, frame: LiveFrame) -> None:
        """A live frame (frames.live_frames), once: every consumer of the job offers it."""
        if self.frames and frame["last"] <= self.frames[-1]["last"]:
            return
        if self.frames and frame["prev"] != self.frames[-1]["last"]:
            self.clear()  # a message lost on the way: what is kept would have a hole
        self.frames.append(frame)
        self.size += len(frame["text"])
        while self.size > RECENT_BYTES and len(self.frames) > 1:
            self.size -= len(self.frames.popleft()["text"])

    def clear(self) -> None:
        self.frames.clear()
        self.size = 0

    def after(self, cursor: int) -> list[LiveFrame] | None:
        """The frames that hold every event after the cursor, in order (the first may begin at or
        below it); [] when there is none; None when the oldest kept frame begins above the cursor
        (read the database)."""
        if not self.frames or self.frames[-1]["last"] <= cursor:
            return []
        if self.frames[0]["prev"] is None or self.frames[0]["prev"] > cursor:
            return None
        return [frame for frame in self.frames if frame["last"] > cursor]


_by_job: dict[int, RecentFrames] = {}


def follow(job_id: int) -> RecentFrames:
    recent = _by_job.setdefault(job_id, RecentFrames())
    recent.followers += 1
    return recent


def unfollow(job_id: int) -> None:
    recent = _by_job.get(job_id)
    if recent is not None:
        recent.followers -= 1
        if recent.followers <= 0:
            del _by_job[job_id]
