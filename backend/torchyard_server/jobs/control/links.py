"""A job's links: the matrix its master's preflight measured between the job's machines on every
network they share (workers/torchyard/supervisor/links.py), kept on the job and shown on its page,
each machine's interfaces credited with their figures, and the choice of network handed to a
relaunch on machines already measured, so that recovery probes nothing.
"""

from __future__ import annotations

import statistics

from django.db import transaction
from torchyard.protocol import LinksChoice
from torchyard.stream_contract import LinkPair, LinkReport

from ...machines.services import InterfaceFigure, machines_record_links
from ..models import Job
from ..spec.plan import Plan


def job_record_links(*, job_id: int, attempt: int, ts: float, report: LinkReport) -> None:
    """Keep the master's link report of `attempt` (an older attempt's, arriving late, is dropped)."""
    with transaction.atomic():
        job = Job.objects.select_for_update().filter(pk=job_id).only("pk", "links").first()
        if job is None or attempt < int((job.links or {}).get("attempt", -1)):
            return
        job.links = {**report, "attempt": attempt, "measured_at": ts}
        job.save(update_fields=["links"])
        machines_record_links(figures=interface_figures(report, job_id=job_id, ts=ts))


def interface_figures(report: LinkReport, *, job_id: int, ts: float) -> dict[str, dict[str, InterfaceFigure]]:
    """{machine name: {interface: figure}}: each interface's median over the pairs it was in."""
    machines = report.get("machines") or {}
    interfaces = {row.get("network"): row.get("interfaces") or {} for row in report.get("networks") or []}
    seen: dict[tuple[str, str], list[LinkPair]] = {}
    for pair in report.get("pairs") or []:
        if pair.get("mb_per_s") is None:
            continue
        for rank in (str(pair.get("a")), str(pair.get("b"))):
            name, interface = machines.get(rank), interfaces.get(pair.get("network"), {}).get(rank)
            if name and interface:
                seen.setdefault((name, interface), []).append(pair)
    figures: dict[str, dict[str, InterfaceFigure]] = {}
    for (name, interface), pairs in seen.items():
        figures.setdefault(name, {})[interface] = {
            "mb_per_s": round(statistics.median(p.get("mb_per_s", 0.0) for p in pairs), 1),
            "latency_ms": round(statistics.median(p.get("latency_ms", 0.0) for p in pairs), 3),
            "pairs": len(pairs), "job": job_id, "measured_at": ts,
        }
    return figures


def reused_links(job: Job, plan: Plan) -> LinksChoice:
    """The choice an earlier attempt made ({"network", "master_address"}) when every machine of this
    plan was measured in it; {} (measure again) when one is new, e.g. a hot spare taking over."""
    stored = job.links or {}
    addresses = stored.get("addresses") or {}
    master = plan.node(0)
    if not stored.get("chosen") or master is None or any(not addresses.get(n.machine_name) for n in plan.nodes):
        return {}
    return {"network": stored["chosen"], "master_address": addresses[master.machine_name]}
