"""The health check and the built dashboard (a single-page app with client-side routes)."""

from __future__ import annotations

import mimetypes

from django.conf import settings
from django.http import Http404, HttpResponse, JsonResponse
from django.views.decorators.http import require_GET

from ..rest.renderers import StreamedFileResponse


@require_GET
def health(request):
    return JsonResponse({"status": "ok"})


def _dist_file(relative: str):
    root = settings.FRONTEND_DIST.resolve()
    path = (root / relative).resolve()
    if root not in path.parents and path != root:
        raise Http404()
    if not path.is_file():
        raise Http404()
    return path


@require_GET
def asset(request, path: str):
    file = _dist_file(f"assets/{path}")
    content_type, _ = mimetypes.guess_type(str(file))
    # The response closes the file once it is sent.
    response = StreamedFileResponse(open(file, "rb"), content_type=content_type or "application/octet-stream")  # noqa: SIM115
    # Vite puts a content hash in every asset name: cache them for good.
    response["Cache-Control"] = "public, max-age=31536000, immutable"
    return response


@require_GET
def spa(request, path: str = ""):
    """index.html for every dashboard route, so deep links work; the app asks /api for data and
    shows its login page when the session is missing."""
    try:
        index = _dist_file("index.html")
    except Http404:
        return HttpResponse(
            "<h1>Torchyard</h1><p>The dashboard is not built: run <code>make run</code> "
            "(or <code>npm ci && npm run build</code>). The API is at <a href='/api/docs/'>/api/docs/</a>.</p>",
            status=503,
        )
    response = HttpResponse(index.read_bytes(), content_type="text/html; charset=utf-8")
    response["Cache-Control"] = "no-cache"
    return response
