"""`GET /metrics`: the control plane in Prometheus's text format (OpenMetrics when asked for).

One collector builds every family at scrape time, from a few aggregate queries (jobs, nodes and
machines counted by state in the database; GPUs from the machines' reported capabilities and the
live nodes' GPU lists; the usage and goodput ledgers, a scrape folding a few newly ended jobs into
the latter) and two small Redis hashes that the processes owning the other numbers keep
current (streaming/telemetry.py: the ingest loop's entries and lag, the web processes' WebSocket
clients). Nothing is counted in this process, so it does not matter which web process answers.

Who may read it: a Prometheus server with `Authorization: Bearer <TORCHYARD_METRICS_TOKEN>`, or a
staff user (API token or session). No credentials, or a wrong token: 401; a user who is not staff:
403.
"""

from __future__ import annotations

import functools
import logging
import secrets
from collections.abc import Iterator
from typing import Any

import redis
from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.db.models import Count
from django.http import HttpResponse
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from prometheus_client import CollectorRegistry, exposition
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.permissions import BasePermission
from rest_framework.settings import api_settings
from rest_framework.views import APIView

from ..jobs.models import Job, JobNode
from ..jobs.states import NODE_LIVE
from ..machines.models import Machine
from ..machines.states import MACHINE_SCHEDULABLE
from ..reports.goodput import CATEGORIES
from ..reports.goodput_ledger import goodput_counters
from ..streaming import telemetry
from ..usage.selectors import usage_seconds_by_project

log = logging.getLogger(__name__)
SCRAPER = "metrics-token"  # request.auth of a scrape authenticated by TORCHYARD_METRICS_TOKEN
# The ingest reports every second; after this long without a report it counts as down.
INGEST_DOWN_AFTER = 10.0


def _by_state(model: type[Job] | type[JobNode] | type[Machine]) -> dict[str, int]:
    # order_by(): the models' default ordering would otherwise join the GROUP BY.
    return dict(model.objects.order_by().values_list("status").annotate(n=Count("pk")))


def gpu_counts() -> dict[str, int]:
    """Every GPU the machines reported, split into used (held by a live node), free (on a machine
    the planner places nodes on, held by none) and unavailable (the rest: machines offline, pending
    or draining)."""
    used: dict[int, int] = {}
    for machine_id, gpus in JobNode.objects.filter(status__in=NODE_LIVE, machine__isnull=False).values_list(
            "machine_id", "gpus"):
        used[machine_id] = used.get(machine_id, 0) + len(gpus or [])
    counts = {"used": sum(used.values()), "free": 0, "unavailable": 0}
    for machine_id, status, gpu_count in Machine.objects.values_list("pk", "status", "capabilities__gpu_count"):
        idle = max(int(gpu_count or 0) - used.get(machine_id, 0), 0)
        counts["free" if status in MACHINE_SCHEDULABLE else "unavailable"] += idle
    return counts


@functools.cache
def redis_client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)


class TorchyardCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        yield self._states("torchyard_jobs", "Jobs by state.", _by_state(Job), Job.Status.values)
        yield self._states("torchyard_nodes", "Job nodes (one torchrun on one machine, per attempt) by state.",
                           _by_state(JobNode), JobNode.Status.values)
        yield self._states("torchyard_machines", "Registered machines by status.", _by_state(Machine),
                           Machine.Status.values)
        yield self._states("torchyard_gpus", "GPUs the machines report: used by live nodes, free on machines "
                           "that take new nodes, unavailable (offline, pending or draining machines).",
                           gpu_counts(), ["used", "free", "unavailable"])
        yield from self._usage(usage_seconds_by_project())
        yield self._goodput(goodput_counters(now=timezone.now()))
        try:
            client = redis_client(settings.REDIS_URL)
            yield from self._ingest(telemetry.ingest_report(client))
            yield self._states("torchyard_websocket_clients", "Open WebSocket connections, by stream.",
                               telemetry.websocket_clients(client), telemetry.WEBSOCKET_KINDS, label="stream")
        except redis.RedisError as exc:  # the database's numbers still answer
            log.warning("metrics: redis unavailable: %s", exc)

    @staticmethod
    def _states(name: str, documentation: str, counts: dict[str, int], states: Any,
                label: str = "state") -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, documentation, labels=[label])
        for state in states:  # every state, 0 included: a series that vanishes reads as "no data"
            family.add_metric([state], counts.get(state, 0))
        return family

    @staticmethod
    def _usage(totals: dict[str, tuple[float, float]]) -> Iterator[Metric]:
        gpus = CounterMetricFamily("torchyard_gpu_seconds", "GPU-seconds held by jobs' nodes, by project: each node's "
                                   "GPUs times the seconds from its start to its end (or now), since the usage ledger "
                                   "began.", labels=["project"])
        processes = CounterMetricFamily("torchyard_process_seconds", "Process-seconds (ranks times seconds) of jobs' "
                                        "nodes, by project, counted as GPU-seconds are.", labels=["project"])
        for project, (gpu_seconds, process_seconds) in sorted(totals.items()):
            gpus.add_metric([project], gpu_seconds)
            processes.add_metric([project], process_seconds)
        yield gpus
        yield processes

    @staticmethod
    def _goodput(totals: dict[str, dict[str, float]]) -> Metric:
        family = CounterMetricFamily("torchyard_goodput_seconds", "Wall time of ended jobs, by project and what it "
                                     "went to (reports/goodput.py: queued, preempted, code_fetch, environment_build, "
                                     "launch, training, checkpoint, recovery, lost_work, hang, idle); goodput is "
                                     "training over the sum. A job counts once it has ended, from the goodput ledger.",
                                     labels=["project", "category"])
        for project, parts in sorted(totals.items()):
            for category in CATEGORIES:  # every category, 0 included, so a ratio never lacks a term
                family.add_metric([project, category], parts.get(category, 0.0))
        return family

    @staticmethod
    def _ingest(report: dict[str, float]) -> Iterator[Metric]:
        entries = CounterMetricFamily("torchyard_ingest_entries", "Stream entries the ingest loop applied: "
                                      "events (logs, metrics, states...) and liveness (heartbeats).",
                                      labels=["stream"])
        lag = GaugeMetricFamily("torchyard_ingest_lag_seconds", "The longest an entry applied in the ingest's "
                                "last second waited in Redis (0 when none came).", labels=["stream"])
        for kind in telemetry.STREAM_KINDS:
            entries.add_metric([kind], report.get(f"entries:{kind}", 0.0))
            lag.add_metric([kind], report.get(f"lag:{kind}", 0.0))
        yield entries
        yield lag
        age = report.get("age")
        yield GaugeMetricFamily("torchyard_ingest_up", f"1 when the ingest loop reported within the last "
                                f"{INGEST_DOWN_AFTER:.0f} s.", value=int(age is not None and age < INGEST_DOWN_AFTER))
        if age is not None:
            yield GaugeMetricFamily("torchyard_ingest_report_age_seconds", "Seconds since the ingest loop "
                                    "last reported (it does every second).", value=age)


REGISTRY = CollectorRegistry(auto_describe=False)
REGISTRY.register(TorchyardCollector())


class MetricsTokenAuthentication(BaseAuthentication):
    """`Authorization: Bearer <token>`, what Prometheus sends with `authorization: credentials_file:`."""

    def authenticate(self, request):
        kind, _, token = get_authorization_header(request).decode("latin-1").partition(" ")
        if kind.lower() != "bearer":
            return None
        expected = settings.METRICS_TOKEN
        if not expected or not secrets.compare_digest(token.strip().encode(), expected.encode()):
            raise AuthenticationFailed("invalid metrics token.")
        return AnonymousUser(), SCRAPER

    def authenticate_header(self, request) -> str:
        return 'Bearer realm="torchyard-metrics"'


class ScraperOrStaff(BasePermission):
    def has_permission(self, request, view) -> bool:
        return request.auth == SCRAPER or bool(request.user and request.user.is_staff)


class FirstRenderer(BaseContentNegotiation):
    """The body is Prometheus's format whatever the Accept header says; errors are JSON."""

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type

    def select_parser(self, request, parsers):
        return parsers[0] if parsers else None


class MetricsView(APIView):
    authentication_classes = [MetricsTokenAuthentication, *api_settings.DEFAULT_AUTHENTICATION_CLASSES]
    permission_classes = [ScraperOrStaff]
    content_negotiation_class = FirstRenderer

    @extend_schema(exclude=True)  # Prometheus's text format, not part of the JSON API
    def get(self, request):
        encoder, content_type = exposition.choose_encoder(request.headers.get("Accept", ""))
        return HttpResponse(encoder(REGISTRY), content_type=content_type)
