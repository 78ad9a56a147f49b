"""The web process's recent frames of a job (live/recent.py): each frame kept once however many
consumers offer it, never with a hole, bounded in bytes, and answering "read the database" when a
cursor lies before what is kept."""

from __future__ import annotations

import pytest
from torchyard_server.live import recent
from torchyard_server.live.recent import RecentFrames


def frame(prev: int | None, last: int, text: str = "x") -> dict:
    return {"prev": prev, "first": (prev or 0) + 1, "last": last, "text": text}


def test_a_frame_offered_by_every_consumer_is_kept_once_and_frames_after_a_cursor_come_in_order():
    kept = RecentFrames()
    for offered in (frame(10, 12), frame(10, 12), frame(12, 15), frame(12, 15), frame(15, 16)):
        kept.add(offered)
    assert [f["last"] for f in kept.frames] == [12, 15, 16]
    # The first frame may begin at or below the cursor: the consumer cuts it.
    assert [f["last"] for f in kept.after(13)] == [15, 16]
    assert [f["last"] for f in kept.after(10)] == [12, 15, 16]
    assert kept.after(16) == []


def test_a_cursor_before_the_oldest_kept_frame_or_one_without_a_known_prev_is_sent_to_the_database():
    kept = RecentFrames()
    kept.add(frame(10, 12))
    assert kept.after(9) is None
    unknown = RecentFrames()
    unknown.add(frame(None, 3))
    assert unknown.after(2) is None
    assert RecentFrames().after(0) == []


def test_a_frame_that_does_not_follow_on_drops_what_was_kept_rather_than_keep_a_hole():
    kept = RecentFrames()
    kept.add(frame(10, 12))
    kept.add(frame(14, 16))  # 13 and 14 were lost on the way
    assert [f["last"] for f in kept.frames] == [16]
    assert kept.after(12) is None and kept.size == 1


def test_the_oldest_frames_go_once_the_kept_bytes_pass_the_bound_but_never_the_newest(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(recent, "RECENT_BYTES", 10)
    kept = RecentFrames()
    for prev in range(0, 4):
        kept.add(frame(prev, prev + 1, "abcd"))
    assert [f["last"] for f in kept.frames] == [3, 4] and kept.size == 8
    kept.add(frame(4, 5, "a" * 50))
    assert [f["last"] for f in kept.frames] == [5] and kept.size == 50


def test_a_jobs_consumers_share_one_record_which_goes_with_the_last_of_them():
    first, second = recent.follow(901), recent.follow(901)
    assert first is second and first.followers == 2
    recent.unfollow(901)
    assert recent.follow(901) is first
    recent.unfollow(901)
    recent.unfollow(901)
    assert recent.follow(901) is not first
    recent.unfollow(901)
