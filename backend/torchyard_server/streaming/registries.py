"""Hook points through which apps above streaming take part in what the ingest loop does, without it
importing them (core/registry.py; pyproject.toml's import contracts). An app registers its instance
in its AppConfig.ready()."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.registry import Instance, Registry

if TYPE_CHECKING:
    from .bulk import StoredEvent


class BatchListener(Instance):
    def batch_committed(self, rows: list[StoredEvent]) -> None:
        """A batch the ingest loop stored and applied, in id order, once its transaction committed;
        called in the ingest's thread, so what it does delays the next batch."""
        raise NotImplementedError


# The live app's fan-out (live/broadcast.py) sends each batch to the job's WebSocket and SSE clients.
batch_listeners: Registry[BatchListener] = Registry("batch listeners")


def batch_committed(rows: list[StoredEvent]) -> None:
    # The rows are committed: a listener that fails is logged and the loop goes on (a client that
    # missed the batch learns it from the next frame's `prev` and resumes from the database).
    batch_listeners.notify(lambda listener: listener.batch_committed(rows))
