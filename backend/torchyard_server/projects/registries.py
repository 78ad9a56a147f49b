"""Hooks through which apps above projects add to what it shows, without projects importing them
(pyproject.toml's import contracts). An app registers its hook in its AppConfig.ready()."""

from __future__ import annotations

from collections.abc import Callable

# -> {project id: (gpus, processes)}: what the project's live nodes hold now.
HeldLookup = Callable[[], dict[int, tuple[int, int]]]

_held_lookup: HeldLookup | None = None


def register_held_lookup(lookup: HeldLookup) -> None:
    global _held_lookup
    _held_lookup = lookup


def held_by_project() -> dict[int, tuple[int, int]]:
    # Without the jobs app nothing runs, so nothing is held.
    return _held_lookup() if _held_lookup is not None else {}


# Called (inside the change's transaction) after a project's settings changed: the jobs app asks
# for a queue pass, so a raised quota or ceiling lets waiting jobs start at once.
ChangedHook = Callable[[], None]

_changed_hooks: list[ChangedHook] = []


def register_project_changed(hook: ChangedHook) -> None:
    if hook not in _changed_hooks:
        _changed_hooks.append(hook)


def project_changed() -> None:
    for hook in _changed_hooks:
        hook()
