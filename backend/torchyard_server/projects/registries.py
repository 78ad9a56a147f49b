"""Hook points through which apps above projects add to what it shows and does, without projects
importing them (pyproject.toml's import contracts). Each is a named registry (core/registry.py); an
app registers its instance in its AppConfig.ready()."""

from __future__ import annotations

from ..core.registry import Instance, Registry


class HeldLookup(Instance):
    def held(self) -> dict[int, tuple[int, int]]:
        """{project id: (gpus, processes)}: what the project's live nodes hold now."""
        raise NotImplementedError


held_lookups: Registry[HeldLookup] = Registry("held resources lookup", single=True)


def held_by_project() -> dict[int, tuple[int, int]]:
    # Without the jobs app nothing runs, so nothing is held.
    lookup = held_lookups.one_or_none()
    return lookup.held() if lookup is not None else {}


class ProjectChangeListener(Instance):
    def project_changed(self) -> None:
        """Called inside the change's transaction after a project's settings changed."""
        raise NotImplementedError


# The jobs app asks for a queue pass, so a raised quota or ceiling lets waiting jobs start at once.
project_change_listeners: Registry[ProjectChangeListener] = Registry("project change listeners")


def project_changed() -> None:
    for listener in project_change_listeners.all():
        listener.project_changed()
