"""The node's and the rank's halves of a preemption request, without a stack: the supervisor's
grace (never cut through a commit) and the SDK's cheap, cached check."""

from __future__ import annotations

import json

from torchyard import protocol
from torchyard.node.preemption import write_request
from torchyard.sdk import preemption
from torchyard.supervisor.preemption import PreemptionWatch


def test_the_watch_announces_the_request_then_stops_after_the_grace_but_never_mid_commit(tmp_path):
    watch = PreemptionWatch(tmp_path, f"file://{tmp_path / 'ckpt'}")
    assert watch.poll(0.0).line == "" and not watch.requested
    assert write_request(tmp_path, grace=10, reason="preempted by #3") is True
    assert write_request(tmp_path, grace=99, reason="again") is False, "a redelivery keeps the first clock"
    note = watch.poll(1.0)
    assert "preempted by #3" in note.line and "10 s" in note.line and not note.stop
    assert not watch.poll(5.0).stop
    (tmp_path / f"{protocol.COMMITTING_PREFIX}0").write_text("1")
    assert "being committed" in watch.poll(12.0).line
    assert not watch.poll(13.0).stop
    (tmp_path / f"{protocol.COMMITTING_PREFIX}0").unlink()
    (tmp_path / "ckpt" / ".tmp-step-00000040").mkdir(parents=True)
    assert not watch.poll(14.0).stop, "a local store's staging folder is a commit in progress"
    (tmp_path / "ckpt" / ".tmp-step-00000040").rmdir()
    assert watch.poll(15.0).stop and watch.stopped_for_grace


def test_a_commit_that_never_ends_is_waited_for_one_more_grace_at_most(tmp_path):
    watch = PreemptionWatch(tmp_path)
    write_request(tmp_path, grace=10, reason="")
    watch.poll(0.0)
    (tmp_path / f"{protocol.COMMITTING_PREFIX}1").write_text("1")
    assert not watch.poll(15.0).stop
    assert watch.poll(21.0).stop


def test_a_yield_is_told_from_a_failure_by_its_marker(tmp_path):
    watch = PreemptionWatch(tmp_path)
    assert watch.yielded() is None
    (tmp_path / protocol.YIELDED_FILE).write_text(json.dumps({"rank": 0, "step": 437}) + "\n")
    assert watch.yielded() == {"rank": 0, "step": 437}


def test_the_sdk_sees_the_request_through_its_env_variable_and_nothing_off_torchyard(tmp_path, monkeypatch):
    monkeypatch.delenv(protocol.ENV_PREEMPT_FILE, raising=False)
    assert preemption.preemption_requested() is False and preemption.should_yield() is False
    target = tmp_path / protocol.PREEMPT_FILE
    monkeypatch.setenv(protocol.ENV_PREEMPT_FILE, str(target))
    monkeypatch.setattr(preemption, "CACHE_SECONDS", 0.0)
    assert preemption.preemption_requested() is False
    write_request(tmp_path, grace=5, reason="preempted by #9")
    assert preemption.preemption_requested() is True and preemption.should_yield() is True
    assert preemption.request()["reason"] == "preempted by #9"
    with preemption.committing():
        assert (tmp_path / f"{protocol.COMMITTING_PREFIX}0").exists()
    assert not (tmp_path / f"{protocol.COMMITTING_PREFIX}0").exists()
