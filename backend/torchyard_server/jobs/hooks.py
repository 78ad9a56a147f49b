"""What the jobs app answers through the registries of the apps below it (machines, projects) and
its own (the events it applies); registered in apps.py."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from torchyard import protocol
from torchyard.stream_contract import AppliedEvent, MetricEvent

from ..machines.models import Machine
from ..machines.registries import MachineRemoval, ProjectUsage, UsageLookup
from ..projects.registries import HeldLookup, ProjectChangeListener
from .control.links import job_record_links
from .control.metrics import job_record_progress
from .control.reports import node_report_state
from .control.stalls import job_record_stall
from .control.stragglers import job_record_pace
from .control.supervision import nodes_on_removed_machine
from .placement.quotas import held_by_project
from .queue_poke import queue_poke_on_commit
from .registries import EventApplier
from .selectors import usage_by_machine


class LiveNodesOnRemovedMachine(MachineRemoval):
    type = "jobs"

    def removing(self, machine: Machine, *, force: bool) -> None:
        nodes_on_removed_machine(machine=machine, force=force)


class NodeUsage(UsageLookup):
    type = "jobs"

    def usage(self) -> dict[int, list[ProjectUsage]]:
        return usage_by_machine()


class NodesHeld(HeldLookup):
    type = "jobs"

    def held(self) -> dict[int, tuple[int, int]]:
        return held_by_project()


class QueuePassOnProjectChange(ProjectChangeListener):
    type = "jobs"

    def project_changed(self) -> None:
        queue_poke_on_commit()


class NodeStateApplier(EventApplier):
    type = protocol.STATE

    def apply(self, events: Sequence[AppliedEvent]) -> None:
        for row in events:
            event = row.event()
            # A supervisor's report of its node; job-scoped states and the controller's own
            # transitions (which carry `previous`) are records only.
            if row.node_id and event["type"] == protocol.STATE and event["scope"] == "node" and "previous" not in event:
                node_report_state(event=event)


class ProgressApplier(EventApplier):
    type = protocol.METRIC
    folds = True  # one fold per job and batch: the latest step wins

    def apply(self, events: Sequence[AppliedEvent]) -> None:
        metrics: dict[int, list[MetricEvent]] = defaultdict(list)
        for row in events:
            event = row.event()
            if event["type"] == protocol.METRIC:
                metrics[row.job_id].append(event)
        for job_id, items in metrics.items():
            job_record_progress(job_id=job_id, metrics=items)


class StallApplier(EventApplier):
    type = protocol.STALLED

    def apply(self, events: Sequence[AppliedEvent]) -> None:
        for row in events:
            event = row.event()
            if event["type"] == protocol.STALLED:
                job_record_stall(job_id=row.job_id, event_id=row.pk, attempt=row.attempt, node_id=row.node_id,
                                 rank=row.rank, payload=event)


class LinksApplier(EventApplier):
    """The master's preflight names the link matrix it measured (links.py): the job keeps it."""

    type = protocol.PREFLIGHT

    def apply(self, events: Sequence[AppliedEvent]) -> None:
        for row in events:
            event = row.event()
            if event["type"] != protocol.PREFLIGHT:
                continue
            report = event.get("links")
            if event.get("ok") and event.get("role") == "master" and isinstance(report, dict):
                job_record_links(job_id=row.job_id, attempt=row.attempt, ts=row.ts.timestamp(), report=report)


class PaceApplier(EventApplier):
    type = protocol.PACE

    def apply(self, events: Sequence[AppliedEvent]) -> None:
        for row in events:
            event = row.event()
            if event["type"] == protocol.PACE:
                job_record_pace(job_id=row.job_id, attempt=row.attempt, node_id=row.node_id, ts=row.ts.timestamp(),
                                payload=event)
