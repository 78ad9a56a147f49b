"""Named registries: the one way a lower layer calls a higher one (baserow's core/registry.py).

A lower app declares a hook point once, in its `registries.py`: an `Instance` subclass whose methods
say what it asks, and a `Registry` of them. A higher app answers by subclassing it, naming its
instance (`type`), and registering it in its AppConfig.ready(); the lower app never imports it
(pyproject.toml's import contracts). A registry keyed by something the lower app already names (an
event type) dispatches on it with `get`; one that a single app answers is `single`; one that many
may listen to is walked with `all`, or with `notify` where a failing listener must not stop the
caller.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Generic, TypeVar

log = logging.getLogger(__name__)


class Instance:
    """One registered answer to a hook point, named by `type` (unique within its registry)."""

    type: str = ""


T = TypeVar("T", bound=Instance)


class AlreadyRegistered(Exception):
    pass


class NotRegistered(LookupError):
    pass


class Registry(Generic[T]):
    def __init__(self, name: str, *, single: bool = False) -> None:
        self.name = name
        # A single registry is answered by one app: a second answer is a mistake, not an override.
        self.single = single
        self._registry: dict[str, T] = {}

    def __repr__(self) -> str:
        return f"<Registry {self.name}: {', '.join(self._registry) or 'empty'}>"

    def register(self, instance: T) -> None:
        if not instance.type:
            raise ValueError(
                f"{type(instance).__name__} has no type: it cannot be registered in the {self.name}"
            )
        if instance.type in self._registry:
            raise AlreadyRegistered(f"{instance.type!r} is already registered in the {self.name}")
        if self.single and self._registry:
            raise AlreadyRegistered(
                f"the {self.name} is answered by {next(iter(self._registry))!r} already; "
                f"{instance.type!r} cannot answer it too"
            )
        self._registry[instance.type] = instance

    def unregister(self, type_name: str) -> None:
        self._registry.pop(type_name, None)

    def get(self, type_name: str) -> T:
        try:
            return self._registry[type_name]
        except KeyError:
            raise NotRegistered(f"nothing is registered as {type_name!r} in the {self.name}") from None

    def get_or_none(self, type_name: str) -> T | None:
        return self._registry.get(type_name)

    def all(self) -> list[T]:
        """Every instance, in the order registered (the order of INSTALLED_APPS)."""
        return list(self._registry.values())

    def one(self) -> T:
        """The answer of a single registry; failing loudly beats going on as if nobody cared."""
        if not self._registry:
            raise NotRegistered(
                f"nothing is registered in the {self.name}: is the app that answers it installed?"
            )
        return next(iter(self._registry.values()))

    def one_or_none(self) -> T | None:
        return next(iter(self._registry.values()), None)

    def notify(self, call: Callable[[T], object]) -> None:
        """Call every listener; one that fails is logged, never raised, and the others still run."""
        for instance in self.all():
            try:
                call(instance)
            except Exception:
                log.exception("%s %r failed", self.name, instance.type)
