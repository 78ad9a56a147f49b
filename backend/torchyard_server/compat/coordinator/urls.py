"""The Rust coordinator's routes at the root paths it documents, beside the canonical `/api/` ones and over the
same views (urls.py puts them before the dashboard's catch-all).

`/jobs` and `/jobs/{id}` are also dashboard pages. They are told apart by content negotiation: a
GET whose Accept header prefers text/html to JSON (a browser opening the page, a reload, a deep
link) gets the dashboard; every other request (curl's `*/*`, `application/json`, a script's fetch,
POST, DELETE) gets the API. The other seed paths are no dashboard page and always answer JSON.

These routes are plain functions over the views, so the OpenAPI schema (which describes the
canonical `/api/` routes) does not list them twice.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse
from django.urls import path

from ...jobs.api import views as jobs
from ...live import sse
from ...reports import purge_api, summaries
from ...streaming import api as streaming
from ...web import views as web
from .api import AUTHENTICATION, Seed001JobsView

Handler = Callable[..., HttpResponse]


def _api(view_class) -> Handler:
    """The canonical view, taking the seed routes' credentials as well (api.AUTHENTICATION)."""
    view = view_class.as_view(authentication_classes=AUTHENTICATION)

    def seed_route(request: HttpRequest, **kwargs) -> HttpResponse:
        return view(request, **kwargs)

    # As the view itself is: DRF checks CSRF for session-authenticated requests, never for tokens.
    seed_route.csrf_exempt = True  # type: ignore[attr-defined]
    return seed_route


def _dashboard_or(handler: Handler) -> Handler:
    def negotiated(request: HttpRequest, **kwargs) -> HttpResponse:
        if request.method == "GET" and request.get_preferred_type(["application/json", "text/html"]) == "text/html":
            return web.spa(request, path=request.path.lstrip("/"))
        return handler(request, **kwargs)

    negotiated.csrf_exempt = True  # type: ignore[attr-defined]
    return negotiated


def _health(request: HttpRequest) -> HttpResponse:
    return web.health(request)


urlpatterns = [
    path("health", _health),
    path("jobs", _dashboard_or(_api(Seed001JobsView))),
    path("jobs/summaries", _api(summaries.JobSummariesView)),
    path("jobs/purge", _api(purge_api.JobPurgeView)),
    path("jobs/<int:job_id>", _dashboard_or(_api(jobs.JobDetailView))),
    path("jobs/<int:job_id>/summary", _api(summaries.JobSummaryView)),
    path("jobs/<int:job_id>/logs", _api(streaming.JobLogsView)),
    path("jobs/<int:job_id>/logs/stream", _api(sse.JobLogStreamView)),
    path("jobs/<int:job_id>/stop", _api(jobs.JobStopView)),
]
