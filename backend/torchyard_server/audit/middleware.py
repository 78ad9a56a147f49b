"""The request being served, for the audit log: services record who acted without every caller
(the canonical views, the seed's aliases, the admin) passing the request down to them."""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from asgiref.sync import iscoroutinefunction
from django.utils.decorators import sync_and_async_middleware

_current: ContextVar[Any] = ContextVar("torchyard_audit_request", default=None)


def current_request() -> Any:
    """The HttpRequest being served in this context, or None (a Celery task, the ingest loop)."""
    return _current.get()


@sync_and_async_middleware
def remember_request(get_response):
    # DRF authenticates inside the view and sets the user on this same HttpRequest, so by the time
    # a service records, `request.user` is whoever the token or session belongs to.
    if iscoroutinefunction(get_response):
        async def middleware(request):
            token = _current.set(request)
            try:
                return await get_response(request)
            finally:
                _current.reset(token)
    else:
        def middleware(request):  # type: ignore[misc]
            token = _current.set(request)
            try:
                return get_response(request)
            finally:
                _current.reset(token)
    return middleware
