"""A SIGTERM during `torchyard-server run`'s start-up is a stop, even where the code it lands in wraps
what it raises (tests/integration/test_crash_only.py sends it at every moment of a real start-up)."""

from __future__ import annotations

import pytest
from torchyard_server.runtime.launcher import StopRequested, stop_requested


def raise_inside_set_name() -> None:
    class Descriptor:
        def __set_name__(self, owner, name):
            raise StopRequested

    class Model:  # its creation calls __set_name__, as importing a Django app's models does
        field = Descriptor()


def test_a_stop_wrapped_by_python_is_still_a_stop():
    with pytest.raises(RuntimeError) as raised:
        raise_inside_set_name()
    assert stop_requested(raised.value)
    assert stop_requested(StopRequested())


def test_any_other_failure_is_a_failure():
    assert not stop_requested(RuntimeError("the database is gone"))
    try:
        try:
            raise ValueError("first")
        except ValueError as exc:
            raise RuntimeError("second") from exc
    except RuntimeError as exc:
        assert not stop_requested(exc)
