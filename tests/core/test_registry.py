"""The one way a lower layer calls a higher one: named registries (core/registry.py), and the hook
points the apps answer."""

import logging

import pytest
from torchyard import protocol
from torchyard_server.core.registry import AlreadyRegistered, Instance, NotRegistered, Registry
from torchyard_server.jobs.registries import (
    QueueListener,
    event_appliers,
    queue_changed,
    queue_listeners,
    resume_lookups,
    resume_manifest_uri,
)


class Greeter(Instance):
    def greet(self) -> str:
        raise NotImplementedError


class English(Greeter):
    type = "en"

    def greet(self) -> str:
        return "hello"


class French(Greeter):
    type = "fr"

    def greet(self) -> str:
        return "bonjour"


def test_an_instance_is_found_by_its_type_and_all_come_in_the_order_registered():
    greeters: Registry[Greeter] = Registry("greeters")
    greeters.register(French())
    greeters.register(English())
    assert greeters.get("en").greet() == "hello"
    assert [g.type for g in greeters.all()] == ["fr", "en"]
    assert greeters.get_or_none("de") is None
    with pytest.raises(NotRegistered, match="'de'"):
        greeters.get("de")


def test_a_second_instance_of_the_same_type_is_refused():
    greeters: Registry[Greeter] = Registry("greeters")
    greeters.register(English())
    with pytest.raises(AlreadyRegistered, match="'en' is already registered in the greeters"):
        greeters.register(English())
    with pytest.raises(ValueError, match="has no type"):
        greeters.register(Greeter())


def test_a_single_registry_takes_one_answer_and_fails_loudly_without_one():
    greeter: Registry[Greeter] = Registry("greeter", single=True)
    assert greeter.one_or_none() is None
    with pytest.raises(NotRegistered, match="nothing is registered in the greeter"):
        greeter.one()
    greeter.register(English())
    with pytest.raises(AlreadyRegistered, match="answered by 'en' already"):
        greeter.register(French())
    assert greeter.one().greet() == "hello"


def test_a_failing_listener_is_logged_and_the_others_still_hear(caplog):
    heard = []

    class Broken(Greeter):
        type = "broken"

        def greet(self) -> str:
            raise RuntimeError("no voice")

    greeters: Registry[Greeter] = Registry("greeters")
    greeters.register(Broken())
    greeters.register(English())
    with caplog.at_level(logging.ERROR, logger="torchyard_server.core.registry"):
        greeters.notify(lambda g: heard.append(g.greet()))
    assert heard == ["hello"]
    assert "greeters 'broken' failed" in caplog.text and "no voice" in caplog.text


def test_without_the_checkpoints_app_a_recovered_job_refuses_to_resume_rather_than_start_over():
    answer = resume_lookups.one()
    resume_lookups.unregister(answer.type)
    try:
        with pytest.raises(NotRegistered, match="resume lookup: is the app that answers it installed"):
            resume_manifest_uri(job_id=1)
    finally:
        resume_lookups.register(answer)


def test_a_queue_listener_that_fails_never_fails_the_queue_pass(caplog):
    heard = []

    class Failing(QueueListener):
        type = "test-failing"

        def queue_changed(self, entries):
            raise RuntimeError("listener down")

    class Recording(QueueListener):
        type = "test-recording"

        def queue_changed(self, entries):
            heard.append(entries)

    queue_listeners.register(Failing())
    queue_listeners.register(Recording())
    try:
        with caplog.at_level(logging.ERROR, logger="torchyard_server.core.registry"):
            queue_changed([])
    finally:
        queue_listeners.unregister("test-failing")
        queue_listeners.unregister("test-recording")
    assert heard == [[]]
    assert "queue listeners 'test-failing' failed" in caplog.text


def test_every_event_type_that_changes_something_has_its_applier():
    applied = {
        protocol.STATE,
        protocol.METRIC,
        protocol.CHECKPOINT,
        protocol.STALLED,
        protocol.ARTIFACT,
        protocol.RESULT,
        protocol.PREFLIGHT,  # the master's carries the link matrix (jobs/links.py)
    }
    assert {kind for kind in applied if event_appliers.get_or_none(kind)} == applied
    # Log lines and resource samples are only stored and sent.
    assert not any(event_appliers.get_or_none(kind) for kind in (protocol.LOG, protocol.RESOURCE))
